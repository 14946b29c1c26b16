"""The evaluation loop and the end of training, on a fake clock (pure, ms)."""

from tests.evaluation._fakes import Clock, FakeDir
from tfdist_opt.evaluation import checkpoints
from tfdist_opt.evaluation import loop


class Chief:
    """The chief's port over time: `up` from `start` until `stop`."""

    def __init__(self, clock, start=0.0, stop=None):
        self.clock, self.start, self.stop = clock, start, stop

    def __call__(self, address):
        t = self.clock()
        return t >= self.start and (self.stop is None or t < self.stop)


def _run(d, clock, chief, *, on_sleep=None, load=None, **kwargs):
    watcher = checkpoints.CheckpointWatcher(d.root, settle_s=2.0, clock=clock, **d.calls())
    end = (
        loop.ChiefWatch(
            "localhost:1", grace_s=3.0, startup_timeout_s=100, clock=clock, answers=chief
        )
        if chief
        else None
    )
    lines, loaded = [], []

    def sleep(s):
        clock.sleep(s)
        if on_sleep:
            on_sleep(clock.now)

    out = loop.run(
        watcher,
        end,
        load or loaded.append,
        lambda item: {"loss": float(item.step or 0)},
        poll_s=1.0,
        clock=clock,
        sleep=sleep,
        log=lines.append,
        **kwargs,
    )
    return out, lines


def test_every_checkpoint_is_evaluated_and_the_last_one_after_the_chief_exits():
    d, clock = FakeDir(), Clock()

    def training(now):  # one ModelCheckpoint file per "epoch", then exit at 10
        for epoch in (1, 2, 3):
            if now == 3 * epoch:
                d.write(f"w.{epoch}.weights.h5", 10, epoch)

    out, _ = _run(d, clock, Chief(clock, start=0.5, stop=9.5), on_sleep=training)
    assert out.reason == "training ended"
    assert [e.checkpoint.step for e in out.evaluations] == [1, 2, 3]
    # epoch 3 was written at t=9 and read only as final (settle not reached),
    # once the chief had been gone 3 s.
    assert clock.now == 13.0


def test_a_load_that_fails_is_skipped_and_reported_and_the_loop_goes_on():
    d, clock = FakeDir(), Clock()
    d.write("bad.weights.h5", 1, 1)
    d.write("ckpt-1.index", 1, 2)
    d.write("ckpt-1.data-00000-of-00001", 1, 2)

    def load(item):
        if item.format == "keras":
            raise OSError("truncated file")

    out, lines = _run(d, clock, Chief(clock, stop=4), load=load)
    assert [e.checkpoint.name for e in out.evaluations] == ["ckpt-1"]
    assert out.skipped == ["bad.weights.h5: OSError: truncated file"]
    assert any("skipped unreadable checkpoint bad.weights.h5" in l for l in lines)


def test_a_file_rewritten_while_loading_is_dropped_and_its_new_version_read():
    d, clock = FakeDir(), Clock()
    d.write("latest.weights.h5", 10, 1)
    calls = []

    def load(item):
        calls.append(item.version)
        if len(calls) == 1:
            d.write("latest.weights.h5", 12, 2)  # the chief overwrote it meanwhile

    out, lines = _run(d, clock, Chief(clock, stop=6), load=load)
    assert calls == [(10, 1), (12, 2)]
    assert [e.checkpoint.version for e in out.evaluations] == [(12, 2)]
    assert any("rewritten while it was read" in l for l in lines)


def test_max_evaluations_follows_tf_keras_checkpoint_numbers():
    d, clock = FakeDir(), Clock()
    for k in (1, 2, 3):
        d.write(f"ckpt-{k}.index", 1, k)
        d.write(f"ckpt-{k}.data-00000-of-00001", 1, k)
    out, _ = _run(d, clock, None, max_evaluations=2)
    assert out.reason == "max_evaluations"
    assert [e.checkpoint.step for e in out.evaluations] == [1, 2]


def test_without_a_chief_timeout_stops_the_loop():
    d, clock = FakeDir(), Clock()
    out, _ = _run(d, clock, None, timeout_s=5.0)
    assert out.reason == "timeout" and clock.now == 5.0


def test_a_chief_that_never_came_ends_with_what_is_present():
    d, clock = FakeDir(), Clock()
    d.write("only.weights.h5", 1, 1)
    out, lines = _run(d, clock, Chief(clock, start=1e9))
    assert out.reason == "chief never came"
    assert [e.checkpoint.name for e in out.evaluations] == ["only.weights.h5"]
    assert "never answered within 100 s" in lines[-1]


def test_a_brief_gap_in_the_chief_is_not_the_end():
    clock = Clock()
    up = {0, 1, 3, 4}  # one missed probe at t=2
    watch = loop.ChiefWatch("h:1", grace_s=3.0, clock=clock, answers=lambda a: int(clock.now) in up)
    states = []
    for t in range(9):
        clock.now = float(t)
        states.append(watch.poll())
    assert states == ["running"] * 8 + ["ended"]


def test_a_chief_gone_before_the_first_probe_ends_on_the_launchers_cue():
    # A short training finished before a slow evaluator's first probe: the
    # chief is never seen, so without the cue it waits out startup_timeout_s.
    clock = Clock()
    cue = {"ended": False}
    watch = loop.ChiefWatch(
        "h:1",
        grace_s=3.0,
        startup_timeout_s=300,
        clock=clock,
        answers=lambda a: False,
        ended=lambda: cue["ended"],
    )
    assert watch.poll() == "waiting"
    clock.now = 1.0
    cue["ended"] = True
    assert watch.poll() == "ended"  # at once: no grace needed, no 300 s wait


def test_chief_address_is_the_chief_or_worker_0():
    assert loop.chief_address(None) is None
    assert (
        loop.chief_address({"cluster": {"worker": ["a:1", "b:1"], "evaluator": ["e:1"]}}) == "a:1"
    )
    assert (
        loop.chief_address({"cluster": {"chief": ["c:1"], "worker": ["a:1"], "ps": ["p:1"]}})
        == "c:1"
    )
