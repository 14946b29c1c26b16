"""ScaledLearningRate on 2 virtual replicas: formula, warmup, resume, momentum."""

import keras
import numpy as np
import pytest

from tfdist_opt.callbacks import DistributedBackupAndRestore
from tfdist_opt.callbacks import ScaledLearningRate
from tfdist_opt.callbacks import lr_math
from tests.callbacks._models import GLOBAL_BATCH, dataset, model


class LrRecorder(keras.callbacks.Callback):
    """The rate each update uses, keyed by optimizer step."""

    def __init__(self):
        super().__init__()
        self.lrs = {}
        self.momentum_norm = {}

    def on_train_batch_begin(self, batch, logs=None):
        if getattr(self.model, "_tfdist_opt_skipping", False):
            return
        opt = self.model.optimizer
        step = int(opt.iterations.numpy())
        self.lrs[step] = float(opt.learning_rate.numpy())
        self.momentum_norm[step] = float(sum(np.abs(v.numpy()).sum() for v in opt.momentums))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(base_lr=0.1, base_batch_size=0, global_batch_size=8), "base_batch_size=0"),
        (
            dict(
                base_lr=0.1, base_batch_size=4, global_batch_size=8, warmup_steps=2, warmup_epochs=1
            ),
            "not both",
        ),
        (
            dict(base_lr=0.1, base_batch_size=4, global_batch_size=8, warmup_steps=-2),
            "warmup_steps=-2",
        ),
        (
            dict(base_lr=0.1, base_batch_size=4, global_batch_size=8, after_warmup=3),
            "after_warmup=3",
        ),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ScaledLearningRate(**kwargs)


def test_values_equal_formula_at_every_step(strategy):
    decay = lambda step: 0.5 if step >= 12 else 1.0  # noqa: E731
    cb = ScaledLearningRate(0.01, 4, GLOBAL_BATCH, warmup_epochs=1, after_warmup=decay)
    rec = LrRecorder()
    hist = model(strategy).fit(dataset(), epochs=2, verbose=0, callbacks=[cb, rec])
    assert cb.scaled_lr == pytest.approx(0.02)
    for step in (0, 1, 4, 7, 8, 11, 12, 15):  # warmup_epochs=1 -> 8 steps
        expected = lr_math.scheduled_lr(step, 0.01, 0.02, 8, decay)
        assert rec.lrs[step] == pytest.approx(expected, rel=1e-6), step
    assert rec.lrs[4] == pytest.approx(0.015, rel=1e-6)
    # epoch logs: the rate of the epoch's last update (steps 7 and 15)
    assert hist.history["lr"] == pytest.approx([0.01875, 0.01], rel=1e-6)


def test_resume_from_backup_continues_schedule(strategy, tmp_path):
    """Stop after 5 of 16 steps, resume into a fresh model: rates 5..15 as formula."""

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 5:
                raise KeyboardInterrupt  # a crash: fit exits without cleanup

    def callbacks(*extra):
        return [
            DistributedBackupAndRestore(str(tmp_path), save_freq=1),
            ScaledLearningRate(0.01, 4, GLOBAL_BATCH, warmup_steps=10),
            *extra,
        ]

    with pytest.raises(KeyboardInterrupt):
        model(strategy).fit(dataset(), epochs=2, verbose=0, callbacks=callbacks(Stop()))
    rec = LrRecorder()
    model(strategy).fit(dataset(), epochs=2, verbose=0, callbacks=callbacks(rec))
    assert sorted(rec.lrs) == list(range(5, 16))
    for step, lr in rec.lrs.items():
        assert lr == pytest.approx(lr_math.scheduled_lr(step, 0.01, 0.02, 10), rel=1e-6)


def test_momentum_correction_scales_buffers(strategy):
    """With a zero-gradient-free check: momentum buffer ratio follows new/old lr."""
    scaled = ScaledLearningRate(0.01, 4, GLOBAL_BATCH, warmup_steps=4, momentum_correction=True)
    m = model(strategy)
    m.fit(dataset(16), epochs=1, verbose=0)  # non-zero momentum buffers
    opt = m.optimizer
    before = [v.numpy().copy() for v in opt.momentums]
    scaled.set_model(m)
    scaled.set_params({"epochs": 1, "steps": 2})
    scaled.on_train_begin()
    opt.learning_rate = 0.02  # rate in force before this step
    opt.iterations.assign(1)  # step 1 of 4: lr 0.0125
    scaled.on_train_batch_begin(0)
    factor = 0.0125 / 0.02
    for b, v in zip(before, opt.momentums):
        np.testing.assert_allclose(v.numpy(), b * factor, rtol=1e-6)
    assert float(opt.learning_rate.numpy()) == pytest.approx(0.0125)


def test_momentum_correction_needs_sgd_momentum(strategy):
    m = model(strategy, momentum=0.0)
    cb = ScaledLearningRate(0.01, 4, GLOBAL_BATCH, momentum_correction=True)
    with pytest.raises(ValueError, match="momentum > 0"):
        m.fit(dataset(16), epochs=1, verbose=0, callbacks=[cb])
