"""Keras 3's own `model.fit` / `evaluate` / `predict` under parameter servers.

Keras 3 has no `ClusterCoordinator` code (keras-team/keras#18624, #20585):
its `fit` under a `ParameterServerStrategy` stops in `_maybe_symbolic_build`
("you need to pass this dataset to ClusterCoordinator.
create_per_worker_dataset"), and with a `tfdist_opt.build_dataset` pipeline
in `cardinality` ("Cannot get the cardinality of a dataset that is not
built"). A Keras model built inside `KerasParameterServerStrategy.scope()`
gets its class swapped, for that one instance, to a cached subclass
(`_class_swap.cached_subclass`) whose `fit`, `evaluate` and `predict` call
`tfdist_opt.parameter_server.fit` / `evaluate` / `predict` with the same
arguments: same step loop, same results, same callbacks. No Keras class is
modified; a model built under any other strategy keeps its class. The
subclass keeps the original class name, so a saved `.keras` file loads as
a plain Keras model. Its `save` / `save_weights` (so Keras's
`ModelCheckpoint` and `BackupAndRestore`) work with sharded variables
(`variables.make_sharded_savable`).

Keras's `train_on_batch` / `test_on_batch` / `predict_on_batch` are left as
Keras has them: they run one step on the chief, reading and writing the
variables on the parameter servers.
"""

from __future__ import annotations

from tfdist_opt import runtime
from tfdist_opt.strategy.saving import chief_saving


class CoordinatorTraining:
    """Mixin in front of a Keras Model class; see the module docstring."""

    def fit(
        self,
        x=None,
        y=None,
        batch_size=None,
        epochs=1,
        verbose="auto",
        callbacks=None,
        validation_split=0.0,
        validation_data=None,
        shuffle=True,
        class_weight=None,
        sample_weight=None,
        initial_epoch=0,
        steps_per_epoch=None,
        validation_steps=None,
        validation_batch_size=None,
        validation_freq=1,
    ):
        """`tfdist_opt.parameter_server.fit(self, ...)`; Keras's arguments."""
        from tfdist_opt.parameter_server import training

        return training.fit(
            self,
            x,
            y,
            batch_size=batch_size,
            epochs=epochs,
            verbose=verbose,
            callbacks=callbacks,
            validation_split=validation_split,
            validation_data=validation_data,
            shuffle=shuffle,
            class_weight=class_weight,
            sample_weight=sample_weight,
            initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch,
            validation_steps=validation_steps,
            validation_batch_size=validation_batch_size,
            validation_freq=validation_freq,
        )

    def evaluate(
        self,
        x=None,
        y=None,
        batch_size=None,
        verbose="auto",
        sample_weight=None,
        steps=None,
        callbacks=None,
        return_dict=False,
        **kwargs,
    ):
        """`tfdist_opt.parameter_server.evaluate(self, ...)`; Keras's arguments."""
        from tfdist_opt.parameter_server import training

        kwargs.pop("_use_cached_eval_dataset", None)  # Keras-internal, no effect here
        if kwargs:
            raise TypeError(
                "Invalid keyword argument(s) for `evaluate` under parameter-server "
                f"training: not recognized. Received: {sorted(kwargs)}. Expected "
                "keras.Model.evaluate's arguments."
            )
        return training.evaluate(
            self,
            x,
            y,
            batch_size=batch_size,
            verbose=verbose,
            sample_weight=sample_weight,
            steps=steps,
            callbacks=callbacks,
            return_dict=return_dict,
        )

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """`tfdist_opt.parameter_server.predict(self, ...)`; Keras's arguments."""
        from tfdist_opt.parameter_server import training

        return training.predict(
            self, x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )

    def save(self, filepath, *args, **kwargs):
        """Keras's `save`; sharded variables are read shard by shard."""
        _sharded_savable(self)
        return super().save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        """Keras's `save_weights`; sharded variables are read shard by shard."""
        _sharded_savable(self)
        return super().save_weights(filepath, *args, **kwargs)


def _sharded_savable(model) -> None:
    from tfdist_opt.parameter_server import variables as variables_lib

    variables_lib.make_sharded_savable(model.variables)


def adopt_models(strategy) -> int:
    """Gives every Keras model built under `strategy` the `CoordinatorTraining`
    subclass; returns how many were swapped now (see `chief_saving.adopt_models`
    for how new models are found cheaply). Does nothing while
    `training.steps_running`.
    """
    state = runtime.peek(strategy)
    if state is not None and state.steps_running:
        return 0
    return chief_saving.adopt_models(strategy, CoordinatorTraining)
