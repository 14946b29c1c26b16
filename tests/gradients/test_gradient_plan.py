"""`GradientPlan`: one decision of the gradient path, read by every site.

What each test proves:
* the plan's path, streams and refusals for each setting, pure;
* `opt_strategy` computes the plan once and attaches that very plan: the
  binding holds it and a hooked optimizer runs its chain (a site that
  planned again would make a second plan);
* every former derivation site agrees with the plan on a grid of settings
  and kinds: `GradientOptions.is_default`, `plan_strategy`'s warnings, the
  Keras binding (wrapped scope, hooked and sharded classes, accumulation)
  and `tfdist-opt info`.
"""

import keras
import pytest

import tfdist_opt
from tfdist_opt.gradients import Cast
from tfdist_opt.gradients import GradientOptions
from tfdist_opt.gradients import GradientStage
from tfdist_opt.gradients import gradient_plan
from tfdist_opt.gradients.binding import hooks
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.zero import sharded_state
from tfdist_opt.strategy import StrategyConfig
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

pytestmark = pytest.mark.usefixtures("no_tf_config")

TWO_WORKERS = {
    "cluster": {"worker": ["localhost:1", "localhost:2"]},
    "task": {"type": "worker", "index": 0},
}


class Keep(GradientStage):
    """A user stage that changes nothing."""

    position = "local"

    def reduce(self, bucket, state, context):
        return bucket


SETTINGS = [
    ({}, ()),
    ({"compression": "bf16"}, ()),
    ({"compression": "fp16"}, ()),
    ({"compression": "powersgd"}, ()),
    ({"compression": "auto"}, ()),
    ({"grad_accum": 2}, ()),
    ({"bytes_per_pack": "auto"}, ()),
    ({"bytes_per_pack": 4096, "collective_streams": 0}, ()),
    ({"shard_optimizer_state": True}, ()),
    ({"collective_streams": 3, "grad_accum": 2}, ()),
    ({}, (Keep(),)),
    ({}, (Cast("bf16"),)),
]
TOPOLOGIES = {
    "one_device": Topology(),
    "mirrored": None,  # cpu_replicas=2
    "multi_worker": Topology(tf_config=TWO_WORKERS),
}


def _plan(kind, kw, stages=(), legacy=False):
    topo = TOPOLOGIES[kind]
    if topo is None:
        topo, kw = Topology(), {**kw, "cpu_replicas": 2}
    cfg = StrategyConfig(**kw)
    options = GradientOptions.from_config(cfg, stages=stages)
    return plan_strategy(cfg, topo, gradients=options, legacy_keras=legacy)


# ------------------------------------------------------------------ pure
def test_paths_and_reasons():
    p = _plan("mirrored", {}).gradients
    assert (p.path, p.hooked, p.streams) == ("tf", False, 0)
    assert p.reasons[0].startswith("not hooked")
    p = _plan("mirrored", {"grad_accum": 2, "compression": "bf16"}).gradients
    assert p.path == "accumulation"
    assert p.reasons == ("hooked (compression='bf16', grad_accum=2)",)
    assert [s.name for s in p.chain.stages] == ["Accumulate", "Cast", "AllReduce"]
    assert _plan("mirrored", {"shard_optimizer_state": True}).gradients.path == "zero"
    assert _plan("mirrored", {"compression": "powersgd"}).gradients.path == "replica"
    p = _plan("multi_worker", {}).gradients
    assert (p.path, p.streams) == ("replica", gradient_plan.AUTO_STREAMS)
    assert p.reasons == (
        "hooked (hooked=True)",
        "multi-worker with Keras 3: the update is fused",
        "collective_streams=auto: 2 pieces in flight (RING, bytes_per_pack=0)",
    )
    p = _plan("multi_worker", {}, legacy=True).gradients
    assert (p.path, p.streams) == ("tf", 0)
    assert "tf_keras" in p.reasons[-1]
    assert p.describe().startswith("tf: TF's own all-reduce")


def test_streams_that_a_path_bypasses_warn_from_the_plan():
    s = _plan("multi_worker", {"collective_streams": 3, "grad_accum": 2})
    want = "collective_streams=3 has no effect with grad_accum=2"
    assert any(w.startswith(want) for w in s.gradients.warnings)
    assert [w for w in s.warnings if w.startswith(want)] == list(s.gradients.warnings)
    assert s.gradients.streams == 3  # as asked (it has no effect there)


@pytest.mark.parametrize("kw,stages", SETTINGS)
@pytest.mark.parametrize("kind", sorted(TOPOLOGIES))
def test_every_site_agrees_with_the_plan(kind, kw, stages):
    plan = _plan(kind, kw, stages)
    g = plan.gradients
    assert g.options.is_default is (not g.hooked)
    assert gradient_plan.plan_of(g.options).path == g.path
    assert g.chain.stages == g.options.chain().stages
    bypass = [w for w in plan.warnings if "that gradient path runs its own" in w]
    assert bypass == list(g.warnings)
    want = "tf" if g.options.is_default else None
    want = want or ("zero" if g.options.shard_optimizer_state else None)
    want = want or ("accumulation" if g.options.grad_accum > 1 else "replica")
    assert g.path == want


@pytest.mark.parametrize(
    "kw,stages,name",
    [
        ({"grad_accum": 2}, (), "grad_accum"),
        ({"compression": "auto"}, (), "compression"),
        ({"shard_optimizer_state": True}, (), "shard_optimizer_state"),
        ({"bytes_per_pack": "auto"}, (), "bytes_per_pack"),
        ({}, (Keep(),), "gradient_stages"),
    ],
)
def test_tf_keras_refuses_what_needs_the_hooks_in_the_plan(kw, stages, name):
    with pytest.raises(ValueError, match=rf"`{name}` with tf_keras.*Received: {name}="):
        _plan("mirrored", kw, stages, legacy=True)


# ---------------------------------------------------- in TF (2 replicas)
def test_opt_strategy_plans_once_and_attaches_that_plan(monkeypatch):
    made = []
    real_of = gradient_plan.plan_of

    def counting_plan_of(*args, **kwargs):
        made.append(real_of(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(gradient_plan, "plan_of", counting_plan_of)
    strategy = tfdist_opt.opt_strategy(
        cpu_replicas=2, mode="mirrored", all_reduce="reduce_to_one", compression="bf16"
    )
    assert len(made) == 1, made
    binding = keras_binding.binding_of(strategy)
    assert binding.plan is made[0] and binding.options is made[0].options
    with strategy.scope():
        optimizer = keras.optimizers.SGD(0.1)
    assert hooks.state_of(optimizer).chain is made[0].chain
    assert len(made) == 1


@pytest.mark.parametrize("kw,stages", SETTINGS)
def test_the_binding_runs_the_path_the_plan_says(strategy, kw, stages):
    g = _plan("mirrored", kw, stages).gradients
    keras_binding.attach(strategy, g)
    try:
        assert ("scope" in vars(strategy)) is g.hooked
        with strategy.scope():
            optimizer = keras.optimizers.Adam(0.1)
        state = hooks.state_of(optimizer)
        assert hooks.is_hooked(optimizer) is g.hooked
        if g.hooked:
            assert state.chain is g.chain
            assert isinstance(optimizer, sharded_state.ShardedStateHooks) is (g.path == "zero")
            assert (state.grad_accum > 1) is (g.path == "accumulation")
    finally:
        keras_binding.detach(strategy)


def test_fit_checks_the_batch_contract_of_the_planned_path(strategy):
    """`global_batch.check_fit_input` asks the plan whether it accumulates."""
    import tensorflow as tf

    from tfdist_opt.keras import global_batch

    odd = tf.data.Dataset.range(10).batch(5)  # 5 is no multiple of 2 replicas
    keras_binding.attach(strategy, _plan("mirrored", {"grad_accum": 2}).gradients)
    try:
        with pytest.raises(ValueError, match="Invalid batch contract: with grad_accum"):
            global_batch.check_fit_input(strategy, odd)
    finally:
        keras_binding.detach(strategy)
    with pytest.raises(ValueError, match="global batch"):
        global_batch.check_fit_input(strategy, odd)
