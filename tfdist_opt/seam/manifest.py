"""The manifest: every private TensorFlow / Keras name tfdist_opt relies on.

Keras 3 and TF offer no public hook for some of what tfdist_opt does (the
gradient all-reduce, accumulation under tf.distribute, per-replica batch
cardinality, the coordination service's key-value store). Each use is listed
here with the upstream reason; `tests/test_private_api.py` resolves every
entry, so a TF/Keras upgrade that removes or renames one fails there, by
name, instead of deep inside a training step. It also checks that every
`obj._name` the package reads is either its own or listed here, and that
only `tfdist_opt.seam` imports `keras.src` or `tensorflow.python`.

An entry with `params` is a method whose signature the gradient hooks rely
on (`tfdist_opt.gradients.upstream.check()` compares it with the installed
Keras before any step).

Pure Python: `ENTRIES` is data; `missing()` imports what it checks.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

# Every entry resolved on each cell of the version matrix (.ci/version_matrix:
# TensorFlow 2.18-2.21, each with Keras 3.12 and 3.15); no version needs
# another name.
CHECKED_VERSIONS = {"tensorflow": "2.18-2.21", "keras": "3.12-3.15", "tf_keras": "2.18-2.21"}


@dataclasses.dataclass(frozen=True)
class PrivateName:
    """One private name.

    Attributes:
        owner: str. Dotted path of the module or class holding `attr`; a
            trailing `()` means an instance made with no arguments (for
            attributes set in `__init__`).
        attr: str. The attribute (dotted for nested attributes).
        used_in: str. The tfdist_opt module that uses it.
        why: str. Why no public API does, with the upstream issue.
        params: tuple of str, or None. The parameters (with `self`) a
            method must have, checked by `gradients.upstream.check()`.
        resolvable: bool. False for an attribute Keras sets only later (in
            `build`, or from constructor arguments): `missing()` skips it,
            and the test `why` names reads it.
    """

    owner: str
    attr: str
    used_in: str
    why: str
    params: tuple[str, ...] | None = None
    resolvable: bool = True


TF_OPTIMIZER = "keras.src.backend.tensorflow.optimizer.TFOptimizer"
_TF_OPTIMIZER = TF_OPTIMIZER

ENTRIES: tuple[PrivateName, ...] = (
    # ------------------------------------------------ chief-aware saving
    PrivateName(
        "keras.Model()",
        "_distribute_strategy",
        "tfdist_opt.strategy.chief_saving",
        "the strategy Keras 3's TF trainer stores at model construction; "
        "picks the models built under our scope (issue 17; Keras 3 "
        "save/ModelCheckpoint are not chief-aware, tf_keras's were)",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "get_global_attribute",
        "tfdist_opt.strategy.model_registry",
        "reads the thread's 'name_scope_stack': Keras builds and calls a "
        "model inside `backend.name_scope(model.name, caller=model)`, "
        "the one place a new model is seen (no instance-creation hook)",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "set_global_attribute",
        "tfdist_opt.strategy.model_registry",
        "while our scope is entered, the 'name_scope_stack' is a list "
        "that notes the models pushed on it",
    ),
    PrivateName(
        "keras.callbacks.ModelCheckpoint",
        "_save_model",
        "tfdist_opt.strategy.chief_callbacks",
        "the one method that makes the directory and saves; a non-writer "
        "runs it with `filepath` in a temporary directory (issue 17: "
        "os.makedirs without exist_ok races on shared storage)",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_save_model",
        "tfdist_opt.strategy.chief_callbacks",
        "writes weights + training_metadata.json; only the directory's writer runs it",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_load_model",
        "tfdist_opt.strategy.chief_callbacks",
        "a non-writer restores read-only (its _weights_path/"
        "_prev_weights_path/_training_metadata_path attributes), "
        "without Keras's .bkp copy in the shared directory",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_prev_weights_path",
        "tfdist_opt.strategy.chief_callbacks",
        "the `.bkp` copy Keras falls back to (set in __init__ from "
        "backup_dir; tests/test_chief_saving.py reads a torn write back "
        "through it)",
        resolvable=False,
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_prev_training_metadata_path",
        "tfdist_opt.strategy.chief_callbacks",
        "the `.bkp` copy's training metadata (as above)",
        resolvable=False,
    ),
    # ---------------------------------------------------------- gradients
    # Keras has no hook for the gradient all-reduce or for accumulation
    # under tf.distribute (keras-team/keras#17429); the per-optimizer
    # subclass (tfdist_opt.gradients.hooks) overrides or calls these, and
    # tfdist_opt.gradients.upstream also checks their signatures.
    PrivateName(
        "keras.src.backend.tensorflow.optimizer",
        "TFOptimizer",
        "tfdist_opt.gradients.upstream",
        "base of every Keras 3 TF optimizer; only importable from keras.src",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "build",
        "tfdist_opt.gradients.hooks",
        "public, overridden: upstream build, then the accumulators and the autotune",
        params=("self", "variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_all_reduce_sum_gradients",
        "tfdist_opt.gradients.hooks",
        "overridden: the gradient all-reduce Keras 3 runs under "
        "tf.distribute (keras-team/keras#17429)",
        params=("self", "grads_and_vars"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_backend_apply_gradients",
        "tfdist_opt.gradients.hooks",
        "overridden with grad_accum > 1: Keras's own accumulation branch "
        "fails under MirroredStrategy (keras-team/keras#17429, tf-keras#107); "
        "accumulate, all-reduce every k-th micro-step",
        params=("self", "grads", "trainable_variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "apply",
        "tfdist_opt.gradients.hooks",
        "public, relied on: filters, unscales and constrains, calls "
        "`_backend_apply_gradients` once, then `_iterations.assign_add(1)` "
        "once per call (the micro-step count)",
        params=("self", "grads", "trainable_variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "update_step",
        "tfdist_opt.gradients.accumulation",
        "public, called: one variable's update, inside `extended.update`",
        params=("self", "gradient", "variable", "learning_rate"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "add_variable_from_reference",
        "tfdist_opt.gradients.accumulation",
        "public, called: creates the accumulators as tracked optimizer variables",
        params=("self", "reference_variable", "name", "initializer"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_current_learning_rate",
        "tfdist_opt.gradients.hooks",
        "overridden with grad_accum > 1: schedules see updates, not micro-steps",
        params=("self",),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_variable_index",
        "tfdist_opt.gradients.accumulation",
        "maps a (possibly filtered) variable to its accumulator",
        params=("self", "variable"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_variable_index",
        "tfdist_opt.parameter_server.locked_updates",
        "finds a variable's Adam slots (`_momentums`, `_velocities`, "
        "`_velocity_hats`, set in build(); tests/parameter_server/"
        "test_locked_updates.py uses them) for the fused locked update",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_variable_index",
        "tfdist_opt.gradients.fused_updates",
        "finds a variable's SGD momentum / Adam slots (`momentums`; "
        "`_momentums`, `_velocities`, `_velocity_hats`, set in build(); "
        "tests/gradients/test_fused_updates.py uses them) for the fused "
        "update kernel (Keras has no fused-update option)",
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_momentums",
        "tfdist_opt.gradients.fused_updates",
        "Adam's first-moment slots, set in build(); also SGD's `momentums` "
        "(tests/gradients/test_fused_updates.py and "
        "tests/parameter_server/test_locked_updates.py read them)",
        resolvable=False,
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_velocities",
        "tfdist_opt.gradients.fused_updates",
        "Adam's second-moment slots, set in build() (as above)",
        resolvable=False,
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_velocity_hats",
        "tfdist_opt.gradients.fused_updates",
        "AMSGrad's slots, set in build() (as above)",
        resolvable=False,
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_apply_weight_decay",
        "tfdist_opt.gradients.accumulation",
        "weight decay applied once per update under accumulation",
        params=("self", "variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_backend_update_step",
        "tfdist_opt.gradients.sharded_state",
        "overridden with shard_optimizer_state: the replica-context update "
        "step, run on each replica's shard (no sharding hook in Keras, "
        "keras-team/keras#17429)",
    ),
    PrivateName(
        "tensorflow.raw_ops",
        "CollectiveAllToAllV2",
        "tfdist_opt.gradients.zero_collectives",
        "ZeRO's reduce-scatter on CPU (all-to-all + local sum): TF 2.21 "
        "registers CollectiveReduceScatterV2 for NCCL only and has no "
        "tf.distribute all-to-all",
    ),
    PrivateName(
        "tensorflow.raw_ops",
        "CollectiveGatherV2",
        "tfdist_opt.gradients.zero_collectives",
        "one gather of equal-sized shards (ReplicaContext.all_gather "
        "runs two collectives: the lengths, then the padded data)",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_var_key",
        "tfdist_opt.gradients.sharded_state",
        "the key update_step looks slots up by; a shard view carries it",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_track_variable",
        "tfdist_opt.gradients.replica_slots",
        "tracks a slot shard created outside add_variable (so its class "
        "is swapped before a deferred checkpoint restore reaches it)",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.core.Variable",
        "_serialize_to_tensors",
        "tfdist_opt.gradients.replica_slots",
        "Trackable saving protocol: a slot shard saves its full value, "
        "a PowerSGD error buffer every replica's residual",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.core.Variable",
        "_restore_from_tensors",
        "tfdist_opt.gradients.replica_slots",
        "Trackable saving protocol: a slot shard restores its slice, "
        "an error buffer each replica's own residual",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_distribution_strategy",
        "tfdist_opt.gradients.keras_binding",
        "the strategy Keras captured in __init__ (kept private)",
    ),
    PrivateName(
        "keras.src.trainers.epoch_iterator",
        "EpochIterator",
        "tfdist_opt.stall.keras_binding",
        "the fit's EpochIterator (recorded by the model's per-instance "
        "`_maybe_symbolic_build`, `runtime.FitCall`): its `_num_batches` "
        "(set from the input's length) is cleared "
        "when workers' lengths differ, so every worker's epoch ends by "
        "TF's cross-worker end agreement instead of a worker leaving "
        "the epoch while the others wait in a collective (no public hook)",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_iterations",
        "tfdist_opt.gradients.accumulation",
        "the counter upstream apply() increments per call: the micro-step",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_trainable_variables",
        "tfdist_opt.gradients.hooks",
        "the variables build() was given",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_learning_rate",
        "tfdist_opt.gradients.hooks",
        "float variable or schedule",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "get_global_attribute",
        "tfdist_opt.gradients.upstream",
        "its 'name_scope_stack'[-1].caller names the optimizer creating a "
        "variable (Keras has no optimizer-creation hook)",
    ),
    # --------------------------------------------------- parameter server
    PrivateName(
        "tensorflow.__internal__.distribute",
        "ShardedVariable",
        "tfdist_opt.parameter_server.variables",
        "the type of a partitioned variable (variable_partitioner); "
        "TF exports it only under tf.__internal__",
    ),
    PrivateName(
        "keras.Model",
        "_flatten_layers",
        "tfdist_opt.parameter_server.variables",
        "every nested layer (Model.layers is top-level only), to find "
        "Embedding layers whose table is sharded",
    ),
    PrivateName(
        "keras.Model",
        "_symbolic_build",
        "tfdist_opt.parameter_server.steps",
        "builds compiled metrics and losses symbolically before any step "
        "is scheduled, as Keras's own fit does (no coordinator support in "
        "Keras 3: keras-team/keras#18624)",
    ),
    PrivateName(
        "keras.Model()",
        "_compile_metrics",
        "tfdist_opt.parameter_server.steps",
        "the CompileMetrics object whose state steps return statelessly, "
        "so async workers never race on metric variables",
    ),
    # --------------------------------------------------------------- data
    PrivateName(
        "tensorflow.python.distribute.collective_all_reduce_strategy",
        "CollectiveAllReduceExtended",
        "tfdist_opt.strategy.worker_cpu_replicas",
        "MultiWorkerMirroredStrategy's extended class: subclassed to run "
        "several CPU replicas per worker (`replicas`); TF has no public "
        "way to choose a worker's local devices (a CPU-only worker "
        "always gets one replica)",
    ),
    PrivateName(
        "tensorflow.python.distribute.collective_all_reduce_strategy.CollectiveAllReduceExtended",
        "_initialize_local_devices",
        "tfdist_opt.strategy.worker_cpu_replicas",
        "the one method that picks a worker's replica devices "
        "(always CPU:0 without accelerators); overridden to return "
        "replicas / workers logical CPUs",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "DistributedDataset",
        "tfdist_opt.data.pipeline",
        "its `_cardinality` is set to per-replica steps so Keras does "
        "not warn 'ran out of data' (TF reports per-replica batches)",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "DistributedDataset",
        "tfdist_opt.stall.keras_binding",
        "its per-worker datasets (`_cloned_datasets`, after TF's shard "
        "and rebatch) get an identity map counting batches: the only "
        "place a worker's own input is seen before the distributed "
        "iterator's cross-worker agreement collective (no public hook)",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "DistributedDatasetsFromFunction",
        "tfdist_opt.stall.keras_binding",
        "the same count on its per-worker datasets (`_datasets`)",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "_should_use_multi_device_iterator",
        "tfdist_opt.strategy.plain_iterator",
        "a distributed dataset's `_options` (set to TF's PER_REPLICA / "
        "no-fetch options for one CPU replica per worker) decide "
        "whether its iterators are MultiDeviceIterators "
        "(`_should_use_multi_device_iterator`); MultiWorkerMirrored"
        "Strategy takes no such options from the caller",
    ),
    # ---------------------------------------------------- model parallel
    PrivateName(
        "keras.Model()",
        "_loss_tracker",
        "tfdist_opt.model_parallel.model",
        'the Mean metric `fit` logs as "loss"; a custom train_step '
        "(the micro-batched pipeline's) has no public way to update it",
    ),
    # --------------------------------------------------------- callbacks
    PrivateName(
        "tensorflow.python.eager.context",
        "context",
        "tfdist_opt.coordination.kv_store",
        "the coordination service's key-value store (set/get_config_key_value) has no tf.* export",
    ),
    PrivateName(
        "tensorflow.python.framework.errors",
        "AlreadyExistsError",
        "tfdist_opt.coordination.kv_store",
        "raised by set_config_key_value for an existing key",
    ),
    PrivateName(
        "tensorflow.python.eager.context.Context",
        "delete_config_key_value",
        "tfdist_opt.coordination.kv_store",
        "the stall inspector overwrites its progress records: the "
        "service has no overwrite, so delete then insert (no tf.* export)",
    ),
    PrivateName(
        "tensorflow.python.framework.errors",
        "NotFoundError",
        "tfdist_opt.coordination.kv_store",
        "deleting a key that is not there",
    ),
    PrivateName(
        "tensorflow.python.eager.context.Context",
        "wait_at_barrier",
        "tfdist_opt.coordination.kv_store",
        "the coordination service's barrier (no tf.* export): a repeated "
        "opt_strategy() re-runs enable_collective_ops, and a peer's early "
        "collective otherwise reaches the replaced executor and hangs",
    ),
    PrivateName(
        "tensorflow.python.eager.context",
        "context",
        "tfdist_opt.callbacks.restore_agreement",
        "the restored-step agreement at on_train_begin posts and reads "
        "keys in the coordination service's key-value store (through "
        "kv_store.TFKeyValueStore); no tf.* export",
    ),
    PrivateName(
        "keras.src.trainers.trainer.Trainer()",
        "_initial_epoch",
        "tfdist_opt.callbacks.backup",
        "the epoch fit starts at after a restore; Keras's own "
        "BackupAndRestore sets it the same way (no public hook)",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.trainer.TFEpochIterator",
        "_get_iterator",
        "tfdist_opt.gradients.fit_length",
        "returns its `_distributed_dataset` (set in __init__): tells "
        "the fit's training data from validation data when a dataset "
        "is iterated",
    ),
    PrivateName(
        "keras.src.trainers.epoch_iterator",
        "EpochIterator",
        "tfdist_opt.gradients.fit_length",
        "the fit's, recorded by the model's per-instance "
        "`_maybe_symbolic_build` (`runtime.FitCall`); its "
        "`num_batches` is the epoch length Keras derived from any input "
        "kind (arrays, tf.data, generators, PyDataset, steps_per_epoch), "
        "checked against grad_accum before step 1 (no public hook)",
    ),
    PrivateName(
        "keras.src.trainers.epoch_iterator.EpochIterator",
        "num_batches",
        "tfdist_opt.gradients.fit_length",
        "steps per epoch, or None until an input of unknown length ran out",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_iterations",
        "tfdist_opt.gradients.fit_length",
        "micro-steps already accumulated (a restored cycle) when fit "
        "starts, counted toward grad_accum",
    ),
    # ------------------------------------ Keras model.fit under parameter servers
    PrivateName(
        "keras.src.trainers.data_adapters.tf_dataset_adapter",
        "make_class_weight_map_fn",
        "tfdist_opt.parameter_server.data",
        "Keras's own class_weight -> sample_weight map, applied to each "
        "PS worker's dataset so `class_weight` means what it does in "
        "Keras 3's fit (no public export; keras-team/keras#18624: no PS fit)",
    ),
    PrivateName(
        "keras.src.trainers.trainer.Trainer()",
        "_initial_epoch",
        "tfdist_opt.parameter_server.training",
        "the epoch Keras's own BackupAndRestore restored; the coordinator "
        "loop starts there, as Keras's fit does (no public hook)",
    ),
    # ------------------------------------------- Keras steps (XLA, generators)
    PrivateName(
        "keras.Model",
        "_maybe_symbolic_build",
        "tfdist_opt.strategy.keras_steps",
        "overridden for Python-generator input: under a strategy Keras "
        "pulls a batch to build the model, then resets the iterator, "
        "and a generator cannot rewind (training started later than "
        "without a strategy; no public hook)",
    ),
    PrivateName(
        "keras.Model",
        "_symbolic_build",
        "tfdist_opt.strategy.keras_steps",
        "builds the model from the generator adapter's batch specs instead of a consumed batch",
    ),
    PrivateName(
        "keras.src.trainers.data_adapters.generator_data_adapter",
        "GeneratorDataAdapter",
        "tfdist_opt.strategy.keras_steps",
        "recognises Python-generator input (found as the epoch "
        "iterator's `data_adapter` attribute); its `get_tf_dataset` "
        "gives the specs of the batches it already peeked",
    ),
    PrivateName(
        "keras.src.trainers.data_adapters.generator_data_adapter.GeneratorDataAdapter",
        "get_tf_dataset",
        "tfdist_opt.strategy.keras_steps",
        "element_spec of the peeked batches (nothing is consumed)",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.trainer",
        "reduce_per_replica",
        "tfdist_opt.strategy.multi_step",
        "reduces a step's per-replica logs exactly as Keras's own train "
        "function does; the steps_per_execution loop is rebuilt with the "
        "step inlined (Keras's nested tf.function fails multi-worker)",
    ),
    PrivateName(
        "tensorflow.python.data.ops.optional_ops",
        "_OptionalImpl",
        "tfdist_opt.strategy.multi_step",
        "its `_element_spec`, set while the loop is traced, as Keras's "
        "own multi_step_on_iterator does (the spec of an empty Optional "
        "is known only after the step is traced)",
    ),
    # ------------------------------------------------------ logs in the pack
    PrivateName(
        "keras.src.backend.tensorflow.trainer.TensorFlowTrainer",
        "train_step",
        "tfdist_opt.gradients.log_fold",
        "a model whose train_step is Keras's own (compared by code object) "
        "may have its logs computed before the update and summed in the "
        "gradient collective",
    ),
    PrivateName(
        "keras.src.trainers.trainer.Trainer",
        "compute_metrics",
        "tfdist_opt.gradients.log_fold",
        "likewise: the metrics must be Keras's own to move them",
    ),
    PrivateName(
        "keras.src.losses.loss",
        "unscale_loss_for_distribution",
        "tfdist_opt.gradients.log_fold",
        "the loss tracker's value, as Keras's own train_step computes it",
    ),
    PrivateName(
        "keras.Model()",
        "_call_has_training_arg",
        "tfdist_opt.gradients.log_fold",
        "Keras's own train_step passes training=True only then",
    ),
    PrivateName(
        "keras.Model",
        "_compute_loss",
        "tfdist_opt.gradients.log_fold",
        "the loss Keras's own train_step computes (with training=True)",
    ),
    PrivateName(
        "keras.src.utils.file_utils",
        "exists",
        "tfdist_opt.strategy.chief_callbacks",
        "the existence check Keras's BackupAndRestore makes for its "
        "`.bkp` copy (local and remote paths alike)",
    ),
    # ------------------------------------------------ benchmarks/ binaries
    PrivateName(
        "tensorflow.python.eager.context.context()",
        "_config",
        "benchmarks.allreduce_transport",
        "ConfigProto.rpc_options (num_channels_per_target) of the "
        "ServerDef MultiWorkerMirroredStrategy builds from "
        "context.context().config; TF has no public setter for it",
    ),
    PrivateName(
        "tensorflow.tsl.profiler.protobuf.xplane_pb2",
        "XSpace",
        "benchmarks.train_lib.overlap",
        "reads the TF profiler's trace (overlap_fraction); the proto "
        "module is not exported under tf.*",
    ),
    # ---------------------------------------------------------------- Ray
    PrivateName(
        "ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator."
        "_AutoscalingCoordinatorActor",
        "get_reserved_resources",
        "tfdist_opt.launch.ray_elastic",
        "the detached actor `AutoscalingCoordinator` Ray Train V2's elastic "
        "policy sizes groups from re-reads the nodes every 20 s; "
        "`recompute=True` after a lost node restarts at the size alive now "
        "instead of the old size (then a 60 s start timeout). Ray has no "
        "public refresh (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.callback",
        "ControllerCallback.before_controller_execute_failure_decision",
        "tfdist_opt.launch.ray_elastic",
        "the controller hook run before a failed group is restarted "
        "(a DeveloperAPI kept under _internal): after a lost node the "
        "restart waits there until Ray declares the node dead, so it "
        "is sized from the nodes left (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.failure_handling",
        "FailureDecision.RETRY",
        "tfdist_opt.launch.ray_elastic",
        "the decision the hook above receives; compared by name, `RETRY` (ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.execution.controller.state",
        "RunningState",
        "tfdist_opt.launch.ray_elastic",
        "the state a running group is in, compared by class name in "
        "`after_controller_state_update` (a DeveloperAPI hook): the "
        "elastic view is refreshed only while a group runs "
        "(ray[train] 2.60)",
    ),
    PrivateName(
        "ray.train.v2._internal.util",
        "TrainingFramework.TENSORFLOW",
        "tfdist_opt.launch.ray_backend",
        "the `framework` Ray's own TensorflowConfig reports (run state, "
        "dashboard); deriving from that config instead would import "
        "TensorFlow (`ray.train.tensorflow`'s package __init__) in the "
        "launcher and in Ray's train controller (ray[train] 2.60)",
    ),
)


def resolve(entry: PrivateName) -> Any:
    """The object `entry` names; raises AttributeError/ImportError if gone."""
    owner = entry.owner
    instance = owner.endswith("()")
    owner = owner[:-2] if instance else owner
    obj = _import_dotted(owner)
    if instance:
        obj = obj()
    for part in entry.attr.split("."):
        obj = getattr(obj, part)
    return obj


def missing(entries=None) -> list[str]:
    """One line per entry (of `entries`, default `ENTRIES`) that no longer resolves."""
    out = []
    for entry in ENTRIES if entries is None else entries:
        if not entry.resolvable:
            continue
        try:
            resolve(entry)
        except (ImportError, AttributeError) as e:
            out.append(
                f"{entry.owner}.{entry.attr} (used in {entry.used_in}: "
                f"{entry.why}): {type(e).__name__}: {e}"
            )
    return out


def _import_dotted(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(f"cannot import {path}")
