"""Manifest entries of the training packages other than the gradient hooks.

Chief-aware saving, parameter servers, data, model parallelism, callbacks,
Keras steps and logs. Part of the manifest
(`tfdist_opt.seam.manifest.ENTRIES` joins the areas); the reasons and
checks are described there.
"""

from __future__ import annotations

from tfdist_opt.seam.private_name import PrivateName

ENTRIES: tuple[PrivateName, ...] = (
    # ------------------------------------------------ chief-aware saving
    PrivateName(
        "keras.Model()",
        "_distribute_strategy",
        "tfdist_opt.strategy.saving.chief_saving",
        "the strategy Keras 3's TF trainer stores at model construction; "
        "picks the models built under our scope (issue 17; Keras 3 "
        "save/ModelCheckpoint are not chief-aware, tf_keras's were)",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "get_global_attribute",
        "tfdist_opt.keras.model_registry",
        "reads the thread's 'name_scope_stack': Keras builds and calls a "
        "model inside `backend.name_scope(model.name, caller=model)`, "
        "the one place a new model is seen (no instance-creation hook)",
    ),
    PrivateName(
        "keras.src.backend.common.global_state",
        "set_global_attribute",
        "tfdist_opt.keras.model_registry",
        "while our scope is entered, the 'name_scope_stack' is a list "
        "that notes the models pushed on it",
    ),
    PrivateName(
        "keras.callbacks.ModelCheckpoint",
        "_save_model",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "the one method that makes the directory and saves; a non-writer "
        "runs it with `filepath` in a temporary directory (issue 17: "
        "os.makedirs without exist_ok races on shared storage)",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_save_model",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "writes weights + training_metadata.json; only the directory's writer runs it",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_load_model",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "a non-writer restores read-only (its _weights_path/"
        "_prev_weights_path/_training_metadata_path attributes), "
        "without Keras's .bkp copy in the shared directory",
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_prev_weights_path",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "the `.bkp` copy Keras falls back to (set in __init__ from "
        "backup_dir; tests/test_chief_saving.py reads a torn write back "
        "through it)",
        resolvable=False,
    ),
    PrivateName(
        "keras.callbacks.BackupAndRestore",
        "_prev_training_metadata_path",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "the `.bkp` copy's training metadata (as above)",
        resolvable=False,
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
        "_flatten_layers",
        "tfdist_opt.keras.remat_calls",
        "every nested layer (Model.layers is top-level only), to find the "
        "layers created in a keras.RematScope",
    ),
    PrivateName(
        "keras.layers.Layer()",
        "_remat_mode",
        "tfdist_opt.keras.remat_calls",
        "the RematScope mode a layer captured at creation (None outside a "
        "scope); Keras exposes no getter, and tf.recompute_grad refuses the "
        "keyword arguments Keras passes its rematerialized call in a "
        "tf.function",
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
        "tfdist_opt.strategy.devices.worker_cpu_replicas",
        "MultiWorkerMirroredStrategy's extended class: subclassed to run "
        "several CPU replicas per worker (`replicas`); TF has no public "
        "way to choose a worker's local devices (a CPU-only worker "
        "always gets one replica)",
    ),
    PrivateName(
        "tensorflow.python.distribute.mirrored_strategy.MirroredExtended",
        "_get_variable_creator_initial_value",
        "tfdist_opt.keras.replica_initial_values",
        "the initial value of each replica's copy of a mirrored variable; "
        "overridden so that copies created inside a tf.function start from "
        "replica 0's initial tensor, which TF can lift out of an "
        "XLA-compiled function, instead of a read of replica 0's variable, "
        "which it cannot (no public hook)",
    ),
    PrivateName(
        "tensorflow.python.distribute.collective_all_reduce_strategy.CollectiveAllReduceExtended",
        "_initialize_local_devices",
        "tfdist_opt.strategy.devices.worker_cpu_replicas",
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
        "tfdist_opt.stall.settings",
        "its per-worker datasets (`_cloned_datasets`, after TF's shard "
        "and rebatch) get an identity map counting batches: the only "
        "place a worker's own input is seen before the distributed "
        "iterator's cross-worker agreement collective (no public hook)",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "DistributedDatasetsFromFunction",
        "tfdist_opt.stall.settings",
        "the same count on its per-worker datasets (`_datasets`)",
    ),
    PrivateName(
        "tensorflow.python.distribute.input_lib",
        "_should_use_multi_device_iterator",
        "tfdist_opt.keras.plain_iterator",
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
    PrivateName(
        "tensorflow.python.eager.context.context()",
        "_config",
        "tfdist_opt.strategy.kinds.multi_worker",
        "experimental.recv_buf_max_chunk of the ServerDef "
        "MultiWorkerMirroredStrategy builds from context.context().config "
        "(0, TF's default, sends each collective chunk as 4 KB strings); "
        "TF has no public setter for it",
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
        "tfdist_opt.gradients.accumulation.fit_length",
        "returns its `_distributed_dataset` (set in __init__): tells "
        "the fit's training data from validation data when a dataset "
        "is iterated",
    ),
    PrivateName(
        "keras.src.trainers.epoch_iterator",
        "EpochIterator",
        "tfdist_opt.gradients.accumulation.fit_length",
        "the fit's, recorded by the model's per-instance "
        "`_maybe_symbolic_build` (`runtime.FitCall`); its "
        "`num_batches` is the epoch length Keras derived from any input "
        "kind (arrays, tf.data, generators, PyDataset, steps_per_epoch), "
        "checked against grad_accum before step 1 (no public hook)",
    ),
    PrivateName(
        "keras.src.trainers.epoch_iterator.EpochIterator",
        "num_batches",
        "tfdist_opt.gradients.accumulation.fit_length",
        "steps per epoch, or None until an input of unknown length ran out",
    ),
    PrivateName(
        "keras.optimizers.SGD()",
        "_iterations",
        "tfdist_opt.gradients.accumulation.fit_length",
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
        "tfdist_opt.keras.keras_steps",
        "overridden for Python-generator input: under a strategy Keras "
        "pulls a batch to build the model, then resets the iterator, "
        "and a generator cannot rewind (training started later than "
        "without a strategy; no public hook)",
    ),
    PrivateName(
        "keras.Model",
        "_symbolic_build",
        "tfdist_opt.keras.keras_steps",
        "builds the model from the generator adapter's batch specs instead of a consumed batch",
    ),
    PrivateName(
        "keras.src.trainers.data_adapters.generator_data_adapter",
        "GeneratorDataAdapter",
        "tfdist_opt.keras.keras_steps",
        "recognises Python-generator input (found as the epoch "
        "iterator's `data_adapter` attribute); its `get_tf_dataset` "
        "gives the specs of the batches it already peeked",
    ),
    PrivateName(
        "keras.src.trainers.data_adapters.generator_data_adapter.GeneratorDataAdapter",
        "get_tf_dataset",
        "tfdist_opt.keras.keras_steps",
        "element_spec of the peeked batches (nothing is consumed)",
    ),
    PrivateName(
        "keras.src.backend.tensorflow.trainer",
        "reduce_per_replica",
        "tfdist_opt.keras.multi_step",
        "reduces a step's per-replica logs exactly as Keras's own train "
        "function does; the steps_per_execution loop is rebuilt with the "
        "step inlined (Keras's nested tf.function fails multi-worker)",
    ),
    PrivateName(
        "tensorflow.python.data.ops.optional_ops",
        "_OptionalImpl",
        "tfdist_opt.keras.multi_step",
        "its `_element_spec`, set while the loop is traced, as Keras's "
        "own multi_step_on_iterator does (the spec of an empty Optional "
        "is known only after the step is traced)",
    ),
    PrivateName(
        "keras.src.utils.file_utils",
        "exists",
        "tfdist_opt.strategy.saving.chief_callbacks",
        "the existence check Keras's BackupAndRestore makes for its "
        "`.bkp` copy (local and remote paths alike)",
    ),
)
