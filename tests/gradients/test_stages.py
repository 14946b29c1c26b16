"""Gradient stages: the interface, `chain`'s rules, and stages in `fit`.

What each test proves:
* the config strings build the chain of built-in stages, in position order,
  and a built-in stage passed as an object sets the fields it stands for;
* every combination rule raises before anything runs, naming the stages
  (and the settings they came from) and why;
* on 2 virtual CPU replicas: a user `"local"` stage that keeps every value
  (top-k at 100%) and a user `"collective"` stage that sums through
  `context.all_reduce_sum` train exactly like the plain all-reduce; an
  `"after"` stage sees the sums; a stage's `init` runs once and its
  per-replica state is optimizer variables (checkpointed);
* with Cast("bf16") the user collective's tensors travel in bfloat16 (the
  wire stage applies to every collective of the chain).
"""

import importlib.util
import os

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients import Accumulate
from tfdist_opt.gradients import AllReduce
from tfdist_opt.gradients import Cast
from tfdist_opt.gradients import GradientOptions
from tfdist_opt.gradients import GradientStage
from tfdist_opt.gradients import Pack
from tfdist_opt.gradients import PowerSGD
from tfdist_opt.gradients import ZeRO
from tfdist_opt.gradients import chain
from tfdist_opt.gradients.binding import keras_binding
from tests.multiworker import harness

_spec = importlib.util.spec_from_file_location(
    "topk_stage", os.path.join(harness.REPO_ROOT, "docs", "examples", "topk_stage.py")
)
topk_stage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(topk_stage)


class SumThroughContext(GradientStage):
    """A user collective: the plain sum, through `context.all_reduce_sum`."""

    position = "collective"

    def __init__(self):
        self.calls = 0

    def reduce(self, bucket, state, context):
        self.calls += 1
        self.wire = [t.dtype for t in bucket.gradients]
        return bucket.replace(context.all_reduce_sum(bucket.gradients))


class Halve(GradientStage):
    position = "after"

    def init(self, variables, context):
        self.inits = getattr(self, "inits", 0) + 1
        return [context.add_state(v, "halve_seen", per_replica=False) for v in variables]

    def reduce(self, bucket, state, context):
        return bucket.replace([g * 0.5 for g in bucket.gradients])


# ------------------------------------------------------------------ pure
def test_strings_build_the_chain_of_builtin_stages():
    opts = GradientOptions(compression="bf16", grad_accum=2, bytes_per_pack=1 << 20)
    assert [type(s) for s in opts.chain().stages] == [Accumulate, Cast, Pack, AllReduce]
    psgd = GradientOptions(
        compression="powersgd", powersgd_wire="fp16", shard_optimizer_state=False
    )
    assert [type(s) for s in psgd.chain().stages] == [Cast, PowerSGD]
    assert GradientOptions().chain().describe() == "AllReduce (collective)"
    assert GradientOptions().is_default and not GradientOptions(stages=[Halve()]).is_default


def test_builtin_stage_objects_set_their_fields():
    opts = GradientOptions(stages=(Cast("bf16"), Pack(4096), ZeRO(1 << 20)))
    assert (opts.compression, opts.bytes_per_pack, opts.shard_optimizer_state) == (
        "bf16",
        4096,
        True,
    )
    assert opts.shard_bucket_bytes == 1 << 20 and opts.stages == ()
    psgd = GradientOptions(stages=[Accumulate(3), Cast("bf16"), PowerSGD(rank=2, start_step=5)])
    assert (psgd.grad_accum, psgd.compression, psgd.powersgd_wire) == (3, "powersgd", "bf16")
    assert (psgd.powersgd_rank, psgd.powersgd_start_step) == (2, 5)
    assert psgd == GradientOptions(
        compression="powersgd",
        grad_accum=3,
        powersgd_wire="bf16",
        powersgd_rank=2,
        powersgd_start_step=5,
    )


def test_chain_inserts_the_plain_collective_and_keeps_order():
    assert [type(s) for s in chain(Cast("fp16"), Halve()).stages] == [Cast, AllReduce, Halve]
    top = topk_stage.TopK(0.5)
    assert chain(top, Pack("auto")).stages[0] is top


@pytest.mark.parametrize(
    "stages,match",
    [
        ((AllReduce(), Cast("bf16")), r"order.*AllReduce comes before Cast.*accumulate -> local"),
        (
            (PowerSGD(), SumThroughContext()),
            r"PowerSGD and SumThroughContext are both at position .collective",
        ),
        ((Cast("bf16"), Cast("fp16")), r"both at position 'wire'"),
        ((Accumulate(2), Halve()), r"Accumulate and Halve: the accumulated step.*cross-replica"),
        ((PowerSGD(), ZeRO()), r"ZeRO and PowerSGD: PowerSGD's error feedback"),
    ],
)
def test_chain_rules_name_the_stages_and_why(stages, match):
    with pytest.raises(ValueError, match=match):
        chain(*stages)


def test_rules_name_the_settings_stages_came_from():
    with pytest.raises(
        ValueError, match=r"`grad_accum` with shard_optimizer_state=True.*grad_accum=2"
    ):
        GradientOptions(grad_accum=2, shard_optimizer_state=True)
    with pytest.raises(
        ValueError,
        match=r"`grad_accum` with the Halve stage.*grad_accum=4\. Expected.*no Halve stage",
    ):
        GradientOptions(grad_accum=4, stages=[Halve()])
    with pytest.raises(ValueError, match=r"Cast \(from compression='bf16'\) and Cast are both"):
        GradientOptions(compression="bf16", stages=[Cast("fp16")])


def test_bad_stage_values_are_named():
    class Anywhere(GradientStage):
        position = "update"

    with pytest.raises(TypeError, match=r"`stages`.*Received: stages\[0\]='topk'"):
        chain("topk")
    with pytest.raises(ValueError, match=r"`Anywhere.position`.*'local', 'collective', 'after'"):
        chain(Anywhere())
    with pytest.raises(
        TypeError, match=r"`stages`: expected a list or tuple.*Received: stages=Halve"
    ):
        GradientOptions(stages=Halve())
    with pytest.raises(ValueError, match=r"`fraction`.*Received: fraction=0"):
        topk_stage.TopK(0)
    with pytest.raises(ValueError, match=r"`dtype`.*Received: dtype='int8'"):
        Cast("int8")


def test_opt_strategy_checks_gradient_stages_before_building(monkeypatch):
    import tfdist_opt
    from tfdist_opt.strategy import topology

    def boom():
        raise AssertionError("the topology was read: the check came too late")

    monkeypatch.setattr(topology, "detect_topology", boom)
    with pytest.raises(TypeError, match=r"`gradient_stages`.*Received: gradient_stages='topk'"):
        tfdist_opt.opt_strategy(gradient_stages="topk")
    with pytest.raises(
        ValueError, match=r"`grad_accum` with the TopK stage.*Received: grad_accum=2"
    ):
        tfdist_opt.opt_strategy(grad_accum=2, gradient_stages=[topk_stage.TopK(0.5)])


def test_info_shows_the_chain_a_config_makes(monkeypatch):
    from tfdist_opt.cli import info

    monkeypatch.setenv("TFDIST_OPT_GRAD_ACCUM", "2")
    monkeypatch.setenv("TFDIST_OPT_COMPRESSION", "bf16")
    text = info.format_text(info.collect())
    assert (
        "grad stages  : Accumulate (accumulate) -> Cast (wire, lossy) -> AllReduce (collective)"
        in text
    ), text


# --------------------------------------------------- 2 virtual replicas
def _fit(strategy, options, steps=4):
    keras_binding.attach(strategy, options)
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 6)).astype("float32")
    y = rng.normal(size=(128, 3)).astype("float32")
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(3)]
        )
        model.compile(keras.optimizers.SGD(0.1, momentum=0.5), "mse")
    if steps:
        model.fit(
            x[: 32 * steps], y[: 32 * steps], batch_size=32, epochs=1, shuffle=False, verbose=0
        )
    return model


@pytest.fixture(scope="module")
def plain(strategy):
    return _fit(strategy, GradientOptions(hooked=True)).get_weights()


def test_user_stages_that_keep_every_value_train_exactly_as_plain(strategy, plain):
    collective = SumThroughContext()
    for stages in ([topk_stage.TopK(1.0)], [collective]):
        got = _fit(strategy, GradientOptions(stages=stages)).get_weights()
        for a, b in zip(got, plain):
            np.testing.assert_array_equal(a, b)
    assert collective.calls >= 1


def test_after_stage_sees_sums_and_state_is_made_once(strategy, plain):
    halve = Halve()
    model = _fit(strategy, GradientOptions(stages=[halve]), steps=1)
    first = _fit(strategy, GradientOptions(hooked=True), steps=1)
    w0 = _fit(strategy, GradientOptions(hooked=True), steps=0).get_weights()
    for h, f, w in zip(model.get_weights(), first.get_weights(), w0):
        np.testing.assert_allclose(h - w, (f - w) * 0.5, rtol=1e-5, atol=1e-7)
    assert halve.inits == 1
    seen = [v for v in model.optimizer.variables if "halve_seen" in v.path]
    assert len(seen) == 4


def test_topk_residual_is_per_replica_optimizer_state(strategy, tmp_path):
    model = _fit(strategy, GradientOptions(stages=[topk_stage.TopK(0.25)]))
    res = [v for v in model.optimizer.variables if "topk_residual" in v.path]
    assert len(res) == 4
    assert all(r.value.synchronization == tf.VariableSynchronization.ON_READ for r in res)
    local = [[x.numpy() for x in strategy.experimental_local_results(r.value)] for r in res]
    assert any(np.abs(a).max() > 0 for a, _ in local)
    assert any(not np.array_equal(a, b) for a, b in local)  # each replica its own
    path = tf.train.Checkpoint(optimizer=model.optimizer).write(str(tmp_path / "ckpt"))
    for r in res:
        for x in strategy.experimental_local_results(r.value):
            x.assign(tf.zeros_like(x))
    tf.train.Checkpoint(optimizer=model.optimizer).read(path).assert_consumed()
    back = [[x.numpy() for x in strategy.experimental_local_results(r.value)] for r in res]
    for a, b in zip(back, local):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_cast_applies_to_a_user_collective(strategy, plain):
    collective = SumThroughContext()
    got = _fit(strategy, GradientOptions(compression="bf16", stages=[collective])).get_weights()
    assert collective.wire and all(d == tf.float32 for d in collective.wire)
    rel = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, plain))
    assert 0 < rel < 2e-2


class RecordBuckets(GradientStage):
    """A user local stage that passes gradients through and notes its buckets."""

    position = "local"

    def __init__(self):
        self.buckets = set()

    def reduce(self, bucket, state, context):
        self.buckets.add(tuple(v.path for v in bucket.variables))
        return bucket


def test_user_stages_run_once_per_pack_bucket(strategy, plain):
    # 4 variables of 192, 32, 96 and 12 bytes; packs close past 100 bytes
    # (TF's group_by_size rule), so the step is several buckets, every one
    # through the whole chain, and the sums stay exact.
    record = RecordBuckets()
    got = _fit(strategy, GradientOptions(bytes_per_pack=100, stages=[record])).get_weights()
    for a, b in zip(got, plain):
        np.testing.assert_array_equal(a, b)
    assert len(record.buckets) > 1, record.buckets
    paths = [p for b in record.buckets for p in b]
    assert len(paths) == len(set(paths)) == 4, record.buckets
    one = RecordBuckets()
    _fit(strategy, GradientOptions(bytes_per_pack=0, stages=[one]), steps=1)
    assert len(one.buckets) == 1 and len(next(iter(one.buckets))) == 4
