"""shardsmith/shard_writer/jobs_in_hand.py with a real writer pool: answers in the order sent, each with its tag,
and never more jobs in hand than the bound once `send` returns."""

from __future__ import annotations

import time

from shardsmith.shard_writer.jobs_in_hand import JobsInHand
from shardsmith.shard_writer.shard_worker import ShardWriterPool


def test_jobs_come_back_in_the_order_sent_with_their_tags_and_the_bound_holds():
    pool = ShardWriterPool(1)
    try:
        jobs = JobsInHand(pool, per_process=2)
        answers = []
        for n in range(6):
            # jobs of different lengths, each answered only once done
            answers += jobs.send(f"tag{n}", time.sleep, 0.05 * (6 - n))
            assert len(jobs) <= 2
        answers += jobs.all()
        assert len(jobs) == 0
    finally:
        pool.close()
    assert answers == [(f"tag{n}", None) for n in range(6)]
