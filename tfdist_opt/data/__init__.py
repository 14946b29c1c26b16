"""Input pipelines for data-parallel training.

Pure names (sharding decisions, options, sources) import eagerly without
TensorFlow; the tf.data builder (`build_dataset`, `build_input`,
`make_dataset_fn`, `worker_dataset`) loads on first use.

Example:
    >>> strategy = tfdist_opt.opt_strategy(cpu_replicas=2)  # doctest: +SKIP
    >>> ds = tfdist_opt.data.build_dataset("data/train-*.tfrecord", strategy,
    ...                                    global_batch_size=256, map_fn=parse)
    >>> model.fit(ds, epochs=10)
"""

from tfdist_opt import _lazy
from tfdist_opt.data.options import PipelineOptions
from tfdist_opt.data.sharding import ShardPlan
from tfdist_opt.data.sharding import choose_policy
from tfdist_opt.data.sharding import per_replica_batch_size
from tfdist_opt.data.sharding import plan_shards
from tfdist_opt.data.sharding import shuffle_buffer_size
from tfdist_opt.data.sharding import steps_per_epoch
from tfdist_opt.data.sources import ArraySource
from tfdist_opt.data.sources import DatasetFnSource
from tfdist_opt.data.sources import TFDSSource
from tfdist_opt.data.sources import TFRecordSource
from tfdist_opt.data.sources import as_source
from tfdist_opt.data.sources import count_tfrecords

_LAZY = {
    "DistributedInput": "tfdist_opt.data.pipeline",
    "build_dataset": "tfdist_opt.data.pipeline",
    "build_input": "tfdist_opt.data.pipeline",
    "make_dataset_fn": "tfdist_opt.data.pipeline",
    "worker_dataset": "tfdist_opt.data.pipeline",
}

__all__ = [
    "ArraySource",
    "DatasetFnSource",
    "DistributedInput",
    "PipelineOptions",
    "ShardPlan",
    "TFDSSource",
    "TFRecordSource",
    "as_source",
    "build_dataset",
    "build_input",
    "choose_policy",
    "count_tfrecords",
    "make_dataset_fn",
    "per_replica_batch_size",
    "plan_shards",
    "shuffle_buffer_size",
    "steps_per_epoch",
    "worker_dataset",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)
