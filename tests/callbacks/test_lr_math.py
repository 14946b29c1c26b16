"""Pure LR arithmetic: milliseconds, no TensorFlow."""

import subprocess
import sys

import pytest

from tfdist_opt.callbacks import lr_math


def test_pure_modules_do_not_import_tensorflow():
    code = (
        "import sys, tfdist_opt.callbacks.lr_math, tfdist_opt.callbacks.stats, "
        "tfdist_opt.callbacks.ordering; assert 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_linear_scaling_rule():
    assert lr_math.linear_scaled_lr(0.1, 1024, 256) == pytest.approx(0.4)
    assert lr_math.linear_scaled_lr(0.1, 128, 256) == pytest.approx(0.05)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(base_lr=-1, global_batch_size=8, base_batch_size=8), "base_lr=-1"),
        (dict(base_lr=0.1, global_batch_size=0, base_batch_size=8), "global_batch_size=0"),
        (dict(base_lr=0.1, global_batch_size=8, base_batch_size=2.5), "base_batch_size=2.5"),
    ],
)
def test_linear_scaling_rule_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lr_math.linear_scaled_lr(**kwargs)


def test_warmup_is_linear_then_constant():
    values = [lr_math.warmup_lr(s, 0.1, 0.5, 4) for s in range(7)]
    assert values == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5])
    assert lr_math.warmup_lr(3, 0.1, 0.5, 0) == 0.5


def test_schedule_after_warmup_multiplier():
    decay = lambda step: 0.1 if step >= 10 else 1.0  # noqa: E731
    got = [lr_math.scheduled_lr(s, 0.1, 0.4, 3, decay) for s in (0, 2, 3, 9, 10)]
    assert got == pytest.approx([0.1, 0.3, 0.4, 0.4, 0.04])


def test_momentum_correction_factor():
    assert lr_math.momentum_correction(0.1, 0.2) == pytest.approx(2.0)
    assert lr_math.momentum_correction(0.2, 0.2) == 1.0
    assert lr_math.momentum_correction(0.0, 0.2) == 1.0


def test_epochs_to_steps():
    assert lr_math.epochs_to_steps(2.5, 8) == 20
    with pytest.raises(ValueError, match="warmup_epochs=-1"):
        lr_math.epochs_to_steps(-1, 8)
