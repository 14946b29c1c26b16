"""Manifest entries of the gradient hooks (`tfdist_opt.gradients`).

Part of the manifest (`tfdist_opt.seam.manifest.ENTRIES` joins the areas);
the reasons and checks are described there.
"""

from __future__ import annotations

from tfdist_opt.seam.private_name import PrivateName

TF_OPTIMIZER = "keras.src.backend.tensorflow.optimizer.TFOptimizer"
_TF_OPTIMIZER = TF_OPTIMIZER

ENTRIES: tuple[PrivateName, ...] = (
    # ---------------------------------------------------------- gradients
    # Keras has no hook for the gradient all-reduce or for accumulation
    # under tf.distribute (keras-team/keras#17429); the per-optimizer
    # subclass (tfdist_opt.gradients.binding.hooks) overrides or calls these, and
    # tfdist_opt.seam.upstream also checks their signatures.
    PrivateName(
        "keras.src.backend.tensorflow.optimizer",
        "TFOptimizer",
        "tfdist_opt.seam.upstream",
        "base of every Keras 3 TF optimizer; only importable from keras.src",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "build",
        "tfdist_opt.gradients.binding.hooks",
        "public, overridden: upstream build, then the accumulators and the autotune",
        params=("self", "variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_all_reduce_sum_gradients",
        "tfdist_opt.gradients.binding.hooks",
        "overridden: the gradient all-reduce Keras 3 runs under "
        "tf.distribute (keras-team/keras#17429)",
        params=("self", "grads_and_vars"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_backend_apply_gradients",
        "tfdist_opt.gradients.accumulation.accumulation",
        "overridden with grad_accum > 1: Keras's own accumulation branch "
        "fails under MirroredStrategy (keras-team/keras#17429, tf-keras#107); "
        "accumulate, all-reduce every k-th micro-step",
        params=("self", "grads", "trainable_variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "apply",
        "tfdist_opt.gradients.binding.hooks",
        "public, relied on: filters, unscales and constrains, calls "
        "`_backend_apply_gradients` once, then `_iterations.assign_add(1)` "
        "once per call (the micro-step count)",
        params=("self", "grads", "trainable_variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "update_step",
        "tfdist_opt.gradients.accumulation.accumulation",
        "public, called: one variable's update, inside `extended.update`",
        params=("self", "gradient", "variable", "learning_rate"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "add_variable_from_reference",
        "tfdist_opt.gradients.accumulation.accumulation",
        "public, called: creates the accumulators as tracked optimizer variables",
        params=("self", "reference_variable", "name", "initializer"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_current_learning_rate",
        "tfdist_opt.gradients.accumulation.accumulation",
        "overridden with grad_accum > 1: schedules see updates, not micro-steps",
        params=("self",),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_get_variable_index",
        "tfdist_opt.gradients.accumulation.accumulation",
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
        "tfdist_opt.gradients.binding.fused_updates",
        "finds a variable's SGD momentum / Adam slots (`momentums`; "
        "`_momentums`, `_velocities`, `_velocity_hats`, set in build(); "
        "tests/gradients/test_fused_updates.py uses them) for the fused "
        "update kernel (Keras has no fused-update option)",
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_momentums",
        "tfdist_opt.gradients.binding.fused_updates",
        "Adam's first-moment slots, set in build(); also SGD's `momentums` "
        "(tests/gradients/test_fused_updates.py and "
        "tests/parameter_server/test_locked_updates.py read them)",
        resolvable=False,
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_velocities",
        "tfdist_opt.gradients.binding.fused_updates",
        "Adam's second-moment slots, set in build() (as above)",
        resolvable=False,
    ),
    PrivateName(
        "keras.optimizers.Adam",
        "_velocity_hats",
        "tfdist_opt.gradients.binding.fused_updates",
        "AMSGrad's slots, set in build() (as above)",
        resolvable=False,
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_apply_weight_decay",
        "tfdist_opt.gradients.accumulation.accumulation",
        "weight decay applied once per update under accumulation",
        params=("self", "variables"),
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_backend_update_step",
        "tfdist_opt.gradients.zero.sharded_state",
        "overridden with shard_optimizer_state: the replica-context update "
        "step, run on each replica's shard (no sharding hook in Keras, "
        "keras-team/keras#17429)",
    ),
    PrivateName(
        "tensorflow.raw_ops",
        "CollectiveAllToAllV2",
        "tfdist_opt.gradients.collectives.collectives",
        "ZeRO's reduce-scatter on CPU (all-to-all + local sum): TF 2.21 "
        "registers CollectiveReduceScatterV2 for NCCL only and has no "
        "tf.distribute all-to-all",
    ),
    PrivateName(
        "tensorflow.raw_ops",
        "CollectiveGatherV2",
        "tfdist_opt.gradients.collectives.collectives",
        "one gather of equal-sized shards (ReplicaContext.all_gather "
        "runs two collectives: the lengths, then the padded data)",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_var_key",
        "tfdist_opt.gradients.zero.sharded_state",
        "the key update_step looks slots up by; a shard view carries it",
    ),
    PrivateName(
        _TF_OPTIMIZER,
        "_track_variable",
        "tfdist_opt.gradients.binding.replica_slots",
        "tracks a slot shard created outside add_variable (so its class "
        "is swapped before a deferred checkpoint restore reaches it)",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.core.Variable",
        "_serialize_to_tensors",
        "tfdist_opt.gradients.binding.replica_slots",
        "Trackable saving protocol: a slot shard saves its full value, "
        "a PowerSGD error buffer every replica's residual",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.core.Variable",
        "_restore_from_tensors",
        "tfdist_opt.gradients.binding.replica_slots",
        "Trackable saving protocol: a slot shard restores its slice, "
        "an error buffer each replica's own residual",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_distribution_strategy",
        "tfdist_opt.gradients.binding.keras_binding",
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
        "tfdist_opt.gradients.accumulation.accumulation",
        "the counter upstream apply() increments per call: the micro-step",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_trainable_variables",
        "tfdist_opt.gradients.binding.hooks",
        "the variables build() was given",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_learning_rate",
        "tfdist_opt.gradients.accumulation.accumulation",
        "float variable or schedule",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "get_global_attribute",
        "tfdist_opt.seam.upstream",
        "its 'name_scope_stack'[-1].caller names the optimizer creating a "
        "variable (Keras has no optimizer-creation hook)",
    ),
)
