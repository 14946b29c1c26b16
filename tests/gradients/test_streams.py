"""Streamed all-reduce (`collective_streams`): plan, numerics, settings.

* `piece_plan.plan_pieces`: every element of every tensor in exactly one
  piece, in stream order, no piece over the size; bad input named;
* on 2 virtual CPU replicas in one process, a 4-7-1 MLP trained 4 steps
  with pieces of 16 bytes (a tensor spans several pieces, a piece several
  tensors) ends with the weights of TF's one-pack all-reduce (rel 1e-6),
  one collective per piece per replica (the trace's count); bf16 cast per
  piece equals bf16 cast per tensor bit for bit; and a wrong
  reassembly is caught by the same comparison (pieces issued last first);
* `collective_streams="auto"` is 2 on multi-worker RING with
  `bytes_per_pack=0`, 0 with packs, NCCL, PowerSGD, accumulation or ZeRO
  (their own collectives); an explicit count with packs is refused naming
  both fields; a count where it has no effect warns.
(The 2-worker comparison is in tests/multiworker/test_gradients_multiworker.py.)
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients import gradient_plan
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.collectives import piece_plan
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy import StrategyConfig, opt_strategy
from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy.kinds import Kind

IN, BATCH, STEPS = 4, 8, 4


@pytest.mark.parametrize("piece", [1, 3, 4, 7, 100])
def test_pieces_cover_every_element_once_in_stream_order(piece):
    sizes = [3, 0, 5, 1, 9]
    order = [4, 3, 2, 1, 0]
    plan = piece_plan.plan_pieces(sizes, order, piece)
    seen = [s for p in plan for s in p]
    assert all(sum(s.end - s.start for s in p) <= piece for p in plan)
    assert all(sum(s.end - s.start for s in p) == piece for p in plan[:-1])
    # Stream order: tensor by tensor as `order` lists them, elements ascending.
    expected = [(t, e) for t in order for e in range(sizes[t])]
    assert [(s.tensor, e) for s in seen for e in range(s.start, s.end)] == expected


def test_piece_plan_names_bad_input():
    with pytest.raises(ValueError, match="`piece_elements`.*Received: 0"):
        piece_plan.plan_pieces([1], [0], 0)
    with pytest.raises(ValueError, match="`order`.*Received: \\[0, 0\\]"):
        piece_plan.plan_pieces([1, 2], [0, 0], 4)


def _data():
    x = np.random.default_rng(0).normal(size=(BATCH * STEPS, IN)).astype("float32")
    return x, (x[:, :1] * 0.5 - x[:, 2:3]).astype("float32")


def _train(options):
    strategy = opt_strategy(cpu_replicas=2, mode="mirrored", all_reduce="reduce_to_one")
    keras_binding.attach(strategy, options)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,)), keras.layers.Dense(7, activation="tanh"), keras.layers.Dense(1)]
        )
        rng = np.random.default_rng(1)
        model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    return model.get_weights()


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def one_pack():
    return _train(GradientOptions(hooked=True))


def test_streamed_pieces_equal_one_pack(one_pack, monkeypatch):
    calls = []
    real = tf.raw_ops.CollectiveReduceV2

    def counting(**kw):
        calls.append((kw["input"].device, int(kw["input"].shape[0])))
        return real(**kw)

    monkeypatch.setattr(tf.raw_ops, "CollectiveReduceV2", counting)
    got = _train(GradientOptions(hooked=True, collective_streams=2, collective_piece_bytes=16))
    assert _max_rel(got, one_pack) <= 1e-6
    # 4*7 + 7 + 7 + 1 = 43 floats of gradients:
    # pieces of 4 floats, each replica issues its own.
    devices = sorted({d for d, _ in calls})
    assert len(devices) == 2, devices
    per_replica = [c for c in calls if c[0] == devices[0]]
    assert len(per_replica) >= 43 // 4
    assert all(n <= 4 for _, n in per_replica)


def test_bf16_cast_per_piece_equals_bf16_in_one_pack():
    # Cast per piece or per tensor: the same elements, the same bf16 sums
    # (pieces sent in float32 would differ).
    a = _train(GradientOptions(hooked=True, compression="bf16"))
    b = _train(
        GradientOptions(
            hooked=True, compression="bf16", collective_streams=2, collective_piece_bytes=16
        )
    )
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert _max_rel(a, _train(GradientOptions(hooked=True))) > 0  # bf16 shows


def test_a_wrong_reassembly_is_caught(one_pack, monkeypatch):
    real = piece_plan.plan_pieces

    def reversed_pieces(sizes, order, piece_elements):
        # Pieces issued last first: a tensor spanning pieces is joined back
        # in the wrong order.
        return list(reversed(real(sizes, order, piece_elements)))

    monkeypatch.setattr(piece_plan, "plan_pieces", reversed_pieces)
    got = _train(GradientOptions(hooked=True, collective_streams=2, collective_piece_bytes=64))
    assert _max_rel(got, one_pack) > 1e-3


def _streams(cfg, all_reduce="ring", kind="multi_worker"):
    options = GradientOptions.from_config(cfg)
    return gradient_plan.plan_gradients(options, kind, all_reduce, False, cfg.collective_streams)


def test_auto_streams_where_they_apply():
    cfg = StrategyConfig()
    assert _streams(cfg).streams == gradient_plan.AUTO_STREAMS == 2
    assert _streams(cfg, "nccl").streams == 0
    assert _streams(cfg.replace(bytes_per_pack="auto")).streams == 0
    assert _streams(cfg.replace(bytes_per_pack=1 << 20)).streams == 0
    # Paths that run their own collectives keep them.
    for other in (
        {"compression": "powersgd"},
        {"grad_accum": 2},
        {"shard_optimizer_state": True},
    ):
        assert _streams(cfg.replace(**other)).streams == 0, other
    assert _streams(cfg.replace(compression="bf16")).streams == 2
    assert _streams(cfg.replace(compression="auto")).streams == 2
    assert _streams(cfg.replace(collective_streams=3)).streams == 3
    assert _streams(cfg.replace(collective_streams=3), "nccl").streams == 0
    assert _streams(cfg.replace(collective_streams=0)).streams == 0
    options = _streams(cfg).options
    assert options.collective_streams == 2 and options.collective_piece_bytes == 2 << 20
    assert _streams(cfg, kind="mirrored").options.collective_streams == 0


def test_streams_with_packs_is_refused_naming_both():
    with pytest.raises(
        ValueError, match="`collective_streams`.*collective_streams=2, bytes_per_pack=4096"
    ):
        StrategyConfig(collective_streams=2, bytes_per_pack=4096)
    with pytest.raises(ValueError, match="`collective_streams`.*'auto' or an int >= 0.*-1"):
        StrategyConfig(collective_streams=-1)
    with pytest.raises(
        ValueError, match="`collective_piece_bytes`.*Received: collective_piece_bytes=0"
    ):
        StrategyConfig(collective_piece_bytes=0)
    with pytest.raises(ValueError, match="`collective_streams`.*Received: collective_streams=True"):
        GradientOptions(collective_streams=True)


def test_streams_where_they_do_nothing_warn():
    notes = plan_lib.inapplicable(StrategyConfig(collective_streams=2), Kind.MIRRORED, "nccl")
    assert any("collective_streams=2 has no effect" in n for n in notes)
    notes = plan_lib.inapplicable(StrategyConfig(collective_streams=2), Kind.MULTI_WORKER, "nccl")
    assert any("collective_streams=2 has no effect" in n for n in notes)
    assert not plan_lib.inapplicable(
        StrategyConfig(collective_streams=2), Kind.MULTI_WORKER, "ring"
    )
