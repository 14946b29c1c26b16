"""`benchmarks/train.py --breakdown_steps` and `--epochs`: pure parts.

The step breakdown's classifier and figures from hand-made trace events
(names as TF 2.21's profiler writes them), and the coordinator's epoch and
breakdown summary keys.
"""

import pytest

from benchmarks.train_lib import breakdown
from benchmarks.train_lib import peer_compare
from benchmarks.train_lib import settings as settings_lib

STEP = "EagerLocalExecute: __inference_multi_step_on_iterator_844"
MS = 10**9  # picoseconds per ms


@pytest.mark.parametrize(
    "name,category",
    [
        (
            "StatefulPartitionedCall/mlp_1/dense_1/Relu:_MklNativeFusedMatMul",
            "forward_loss_metrics",
        ),
        (
            "StatefulPartitionedCall/gradient_tape/mlp_1/dense_1/MatMul/MatMul:_MklMatMul",
            "backward",
        ),
        ("StatefulPartitionedCall/sgd/powersgd/Qr_1:Qr", "gradient_arithmetic"),
        (
            "StatefulPartitionedCall/sgd/powersgd/AssignAddVariableOp_1:AssignAddVariableOp",
            "gradient_arithmetic",
        ),
        ("StatefulPartitionedCall/sgd/concat:ConcatV2", "gradient_arithmetic"),
        ("StatefulPartitionedCall/sgd/Mul_4:Mul", "optimizer_apply"),
        (
            "StatefulPartitionedCall/sgd/update_0_2/ResourceApplyKerasMomentum:"
            "ResourceApplyKerasMomentum",
            "optimizer_apply",
        ),
        ("StatefulPartitionedCall/sgd/CollectiveReduceV2_1:CollectiveReduceV2", "collective"),
        ("CpuExecutable::ExecuteAsyncOnStream", "xla"),
        ("IteratorGetNextOp::DoCompute", "input"),
        ("KernelAndDeviceFunc::Run", None),
        (STEP, None),
        ("ExecutorState::Process", None),
    ],
)
def test_categorize(name, category):
    assert breakdown.categorize(name, "SGD") == category


def test_breakdown_from_events_medians_and_collectives():
    events = []
    for k in range(3):  # the first traced step is dropped
        t = k * 100 * MS
        events += [
            (STEP, t, t + 40 * MS),
            (
                "StatefulPartitionedCall/mlp/dense/Relu:_MklNativeFusedMatMul",
                t + 1 * MS,
                t + 6 * MS,
            ),
            (
                "StatefulPartitionedCall/gradient_tape/mlp/dense/MatMul:_MklMatMul",
                t + 6 * MS,
                t + 16 * MS,
            ),
            (
                "StatefulPartitionedCall/sgd/CollectiveReduceV2:CollectiveReduceV2",
                t + 16 * MS,
                t + 20 * MS,
            ),
            (
                "StatefulPartitionedCall/sgd/CollectiveReduceV2_1:CollectiveReduceV2",
                t + 22 * MS,
                t + 30 * MS,
            ),
            (
                "StatefulPartitionedCall/sgd/update_0/ResourceApplyKerasMomentum:"
                "ResourceApplyKerasMomentum",
                t + 30 * MS,
                t + 35 * MS,
            ),
        ]
    b = breakdown.breakdown_from_events(events, "sgd")
    assert b["traced_steps"] == 2 and b["step_ms"] == 40.0
    m = b["median_ms"]
    assert (
        m["forward_loss_metrics"],
        m["backward"],
        m["collective_wait"],
        m["optimizer_apply"],
    ) == (5.0, 10.0, 12.0, 5.0)
    assert m["unaccounted"] == 40.0 - 5 - 10 - 12 - 5
    assert [(c["name"], c["median_ms"], c["median_start_ms"]) for c in b["collectives"]] == [
        ("sgd/CollectiveReduceV2", 4.0, 16.0),
        ("sgd/CollectiveReduceV2_1", 8.0, 22.0),
    ]
    assert "collective sgd/CollectiveReduceV2_1: 8.00 ms" in (breakdown.format_breakdown(b))
    assert breakdown.breakdown_from_events([], "sgd") is None


def test_epoch_and_breakdown_summary_keys():
    rows = [
        {
            "epoch_spread": 0.5,
            "step_breakdown_rounds": [{"step_ms": 30.0}, {"step_ms": 40.0}, {"step_ms": 34.0}],
        },
        {"epoch_spread": 0.625},
    ]
    out = peer_compare.extra_summary(("ours", "one_process"), rows)
    assert out == {
        "epoch_spread_ours": 0.5,
        "breakdown_step_ms_ours": 34.0,
        "epoch_spread_one_process": 0.625,
        "epoch_spread_ratio": 0.8,
    }
    out = peer_compare.extra_summary(
        ("ours", "ours_pin", "one_process"),
        [{"epoch_spread": 0.6}, {"epoch_spread": 0.2}, {"epoch_spread": 0.5}],
    )
    assert (out["epoch_spread_ratio"], out["epoch_spread_ratio_pin"]) == (
        pytest.approx(1.2),
        pytest.approx(0.4),
    )
    pin = peer_compare.roles_for("cpu_split", 2, 32)
    assert [(r.name, r.workers, r.extra_flags) for r in pin] == [
        ("ours", 2, ()),
        ("ours_pin", 2, ("--cpu_split=pin",)),
        ("one_process", 1, ("--batch_size=64",)),
    ]


def test_epochs_round_timed_batches_to_whole_epochs():
    args = settings_lib.RunArgs.build(
        settings=[settings_lib.Setting("opt", "tfdist_opt")],
        model="mlp",
        batch_size=32,
        num_classes=10,
        seed=0,
        learning_rate=0.01,
        compare="scaling",
        display_every=10,
        image_size=None,
        rounds=2,
        warmup=5,
        batches=100,
        epochs=8,
    )
    assert args.per_round == 56  # 50 per round -> 7 batches x 8 epochs
