"""Every DoFn that makes resources in setup() survives being serialized again, after setup() and after
teardown(), with Beam's own pickler (cloudpickle): runners that move set-up DoFns between workers (Dask's does)
need it, and a copy never carries the original's thread pool or writer processes."""

from __future__ import annotations

import pytest
from apache_beam.internal import cloudpickle_pickler

from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig
from transforms.duplicates import ContentDigestFn
from transforms.lookup_sizes import LookupSizesFn
from transforms.write_shards import WriteShardFn


def _fns(tmp_path):
    return {
        "LookupSizesFn": LookupSizesFn(1 << 20),
        "ContentDigestFn": ContentDigestFn(1 << 20),
        "WriteShardFn (writer processes)": WriteShardFn(WriterConfig(UnlockedFolder(str(tmp_path)), "pets"),
                                                        processes=1),
    }


@pytest.mark.parametrize("name", ["LookupSizesFn", "ContentDigestFn", "WriteShardFn (writer processes)"])
def test_a_set_up_dofn_pickles_again_without_its_resources(name, tmp_path):
    fn = _fns(tmp_path)[name]
    fn.setup()
    try:
        assert fn._pool is not None, "setup() made no resource: this test would prove nothing"
        copy = cloudpickle_pickler.loads(cloudpickle_pickler.dumps(fn))
        assert copy._pool is None and fn._pool is not None  # the original keeps its own
        copy.setup()  # the copy makes its own and can be used
        assert copy._pool is not None
        copy.teardown()
    finally:
        fn.teardown()
    assert fn._pool is None
    again = cloudpickle_pickler.loads(cloudpickle_pickler.dumps(fn))
    assert again._pool is None
