"""One runtime object per strategy; no tfdist_opt state as attributes on TF/Keras objects."""

import ast
import gc

import keras
import numpy as np

from tests import package_scan
from tfdist_opt import runtime
from tfdist_opt.keras import keras_steps

# `_tfdist_` names that stay on objects, each documented in runtime's
# docstring: `_tfdist_shard` (ZeRO shard variables: unhashable),
# `_tfdist_mixin` (a class attribute of the hook mixin, read in an MRO),
# `_tfdist_dataset_fn` (travels with a build_dataset dataset),
# `_tfdist_opt_skipping` (read by user callbacks), `_tfdist_opt` /
# `_tfdist_opt_ps` (attributes of tfdist_opt's own excepthook functions).
KEPT = {
    "_tfdist_shard",
    "_tfdist_mixin",
    "_tfdist_dataset_fn",
    "_tfdist_opt_skipping",
    "_tfdist_opt",
    "_tfdist_opt_ps",
}


def offences(source: str) -> list[str]:
    """`_tfdist_*` attributes set on objects, or named as strings (to set)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and t.attr.startswith("_tfdist_")
                    and t.attr not in KEPT
                ):
                    name = t.attr
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("_tfdist_")
            and node.value not in KEPT
        ):
            name = node.value
        if name is not None:
            out.append(f"{node.lineno}: {name}")
    return out


def test_no_tfdist_attributes_set_on_objects():
    found = package_scan.offences_in_package(offences)
    assert not found, "\n".join(found)


def test_each_form_is_caught():
    for text in (
        'setattr(strategy, "_tfdist_stall", s)',
        "strategy._tfdist_x = 1",
        'vars(model).setdefault("_tfdist_xla_warned", set())',
        'ATTR = "_tfdist_gradients"',
    ):
        assert offences(text), text
    assert not offences("x = self._tfdist_saved_value()\ndef _tfdist_make(self): pass")


def test_one_runtime_per_strategy_held_weakly():
    class Strategy:
        pass

    s = Strategy()
    assert runtime.runtime_of(s) is runtime.runtime_of(s)
    assert runtime.peek(Strategy()) is None
    runtime.runtime_of(s).jit_fallback = "error"
    assert keras_steps.jit_fallback_of(s) == "error"
    n = len(runtime._RUNTIMES)
    del s
    gc.collect()
    assert len(runtime._RUNTIMES) == n - 1


def test_a_gradient_binding_does_not_keep_its_strategy_alive():
    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.options import GradientOptions

    class Strategy:
        pass

    s = Strategy()
    keras_binding.attach(s, GradientOptions())
    assert keras_binding.options_of(s) == GradientOptions()
    n = len(runtime._RUNTIMES)
    del s
    gc.collect()
    assert len(runtime._RUNTIMES) == n - 1


def test_settings_and_fit_state_live_in_the_runtime(strategy):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(np.ones((16, 4), "float32"), np.ones((16, 1), "float32"), batch_size=8, verbose=0)
    state = runtime.peek(strategy)
    assert state is not None and state.gradient_binding is not None
    assert state.jit_fallback == "warn"
    assert runtime.FITS.get(model) is None  # only while fit runs
    for obj in (strategy, model, model.optimizer):
        assert [k for k in vars(obj) if k.startswith("_tfdist_")] == [], obj
