"""PyTorch datasets over one split of a shardsmith dataset, without TensorFlow (`pip install shardsmith[torch]`).

- `ShardDataset(out, split)`: a map-style `Dataset`; `dataset[i]` reads record i at random through the shards'
  index files, so any sampler works: `shuffle=True` is an exact global shuffle, and `DistributedSampler` splits
  it across ranks.
- `StreamingShardDataset(out, split)`: an `IterableDataset` that reads shards sequentially. Each epoch it
  shuffles the shard order (seed and `set_epoch(epoch)`, as `DistributedSampler`), lays the split's records out
  in that order and gives each DDP rank, then each DataLoader worker of that rank, one contiguous run of them
  (starting mid-shard through the index): every record goes to exactly one worker of one rank, and ranks' counts
  differ by at most one. Records then pass through a `shuffle_buffer`. Call `set_epoch` before each epoch
  with the default `persistent_workers=False`: persistent workers keep the epoch they were started with.

Both yield `(image, target)`: the image a CHW tensor (uint8, or float32 in 0..1 with `dtype="float32"`), resized
to `image_size` when given; the target the label id (classification) or a multi-hot float32 vector
(multi_label). `transform=` takes the decoded PIL image instead (torchvision's transforms, as `ImageFolder`
passes them) and its result is the image; `target_transform=` takes the target. `features=True` yields a dict:
every record key (as `shardsmith.records` gives them, but text as str: the label text, file name, format, key,
URI and `--feature` strings) plus `image`. Every record's checksums are checked as it
is read (shardsmith/read/record_sequence.py). torch is imported by this package only: `import shardsmith` never does.

Resuming mid-epoch (a preempted job): both have `state_dict()` / `load_state_dict(state)`, the protocol torchdata's
`StatefulDataLoader` uses; it takes each DataLoader worker's state inside that worker after each batch, and gives
it back to the same worker of a new loader. A job stopped after any batch and resumed with the same dataset
arguments, `num_workers` and world size reads the rest of the epoch, in the order it would have read it: each
record of the epoch once, over every worker and rank.
- `StreamingShardDataset`'s state is one worker's of one rank: the build (`build_id`, `split`, `num_records`), the
  order's settings (`seed`, `shuffle`, `shuffle_buffer`), the `epoch`, its place (`rank`, `world_size`, `worker`,
  `num_workers`) and the samples it has `yielded` this epoch. The next iteration after `load_state_dict` continues
  that epoch (whatever `set_epoch` said); the ones after it read `set_epoch`'s from its start. Skipping costs no
  reads and no decoding: the shuffle buffer shuffles positions, so the order is replayed on integers (one random
  draw a position fed to the buffer), the positions still in the buffer at the stop (at most `shuffle_buffer`)
  are read at random through the index, and reading streams on from the first position never fed.
- `ShardDataset`'s state is the build alone: the position is the sampler's, and `StatefulDataLoader` saves its own
  `RandomSampler`'s (`shuffle=True`) and a `torchdata.stateful_dataloader.sampler.StatefulDistributedSampler`'s
  (call its `set_epoch` again on resuming).
- Elastic resume (another number of workers or ranks): `ShardDataset` with `ElasticSampler` (shardsmith/elastic.py),
  whose epoch order depends on the seed and epoch alone; its state, the same in every rank, resumes any shape
  (`elastic_state(saved)` takes it out of a StatefulDataLoader's state for a loader of another `num_workers`).
  `StreamingShardDataset(batch_size=B)` (B the DataLoader's) reads global batches whose order depends on the seed
  and epoch alone (elastic.StreamOrder: B consecutive records of the epoch's layout each, shuffled within, dealt
  to ranks and then workers as their steps take them), so it too resumes on any shape through
  `elastic_state(saved)`; without `batch_size` it reads each worker's run of shards and resumes on the same shape.
- A state of another build (a new one published since) is refused with a one-line ValueError that names the
  `version=` reading the saved build while it is kept; so is one of another split, seed or shuffle, and (at the
  next iteration) one of another rank or worker layout.

The modules: samples (a record as a sample), map_style (`ShardDataset`, `ElasticSampler`), streaming
(`StreamingShardDataset`), build_state (a state's build checked), ranks (a copy's rank and DataLoader worker).
"""

from shardsmith.elastic import elastic_state
from shardsmith.torch.map_style import ElasticSampler, ShardDataset
from shardsmith.torch.samples import as_text, decoded_tensor, text_keys
from shardsmith.torch.streaming import StreamingShardDataset

__all__ = ["ElasticSampler", "ShardDataset", "StreamingShardDataset", "as_text", "decoded_tensor", "elastic_state",
           "text_keys"]
