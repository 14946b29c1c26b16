"""ZeRO: sharded optimizer state, and what fits in memory.

Pure: `zero_plan` (shard sizes, refusals, bytes), `memory_plan` (per-replica
bytes of a model under each memory setting: `tfdist-opt memory`).
TensorFlow binding: `sharded_state` (slot shards, the shard update,
full-value checkpoints).
"""
