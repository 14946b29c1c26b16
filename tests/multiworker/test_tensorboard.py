"""TensorBoard under 2 real workers: one writer (the chief), scalars readable.

Reads the event files back with TensorBoard's own reader
(`event_accumulator.EventAccumulator`). Worker script: scripts/tb_train.py.
"""

import glob
import os
import re

import pytest

from tests.multiworker import harness

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard comes with the test extra",
)

from tensorboard.util import tensor_util  # noqa: E402

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]


def _pids_of_event_files(root):
    # events.out.tfevents.<time>.<host>.<pid>.<n>.v2
    files = glob.glob(os.path.join(root, "**", "events.out.tfevents.*"), recursive=True)
    return files, {int(re.search(r"\.(\d+)\.\d+\.v2$", f).group(1)) for f in files}


def _scalars(path):
    """{tag: [values]} of the scalar summaries in `path` (not recursive)."""
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    return {
        tag: [float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    }


def test_only_the_chief_writes_and_the_scalars_read_back(tmp_path):
    res = harness.run_workers(
        2, ["tests/multiworker/scripts/tb_train.py", str(tmp_path)], timeout_s=180
    )
    assert [r.returncode for r in res] == [0, 0], [r.output[-3000:] for r in res]
    pids = {
        int(m.group(2)): m.group(1)
        for r in res
        for m in re.finditer(r"^PID (\S+) (\d+)$", r.output, re.M)
    }
    chief_pid = next(p for p, tag in pids.items() if tag == "worker_0")

    files, writers = _pids_of_event_files(tmp_path / "tb")
    assert files and writers == {chief_pid}, files
    # ours share one event file; Keras's is under train/
    assert len(glob.glob(str(tmp_path / "tb" / "events*"))) == 1, files
    # Keras's own TensorBoard, unchanged in the script, is made chief-only at
    # fit (tfdist_opt.strategy.saving.chief_callbacks); upstream every worker writes.
    _, plain_writers = _pids_of_event_files(tmp_path / "tb_plain")
    assert plain_writers == {chief_pid}, plain_writers

    ours = _scalars(str(tmp_path / "tb"))
    for tag in (
        "throughput/examples_per_sec",
        "throughput/step_time_median",
        "comm/comm_fraction",
        "comm/comm_time",
        "comm/step_time",
    ):
        assert ours.get(tag), (tag, sorted(ours))
    assert all(v > 0 for v in ours["throughput/examples_per_sec"])
    assert len(ours["comm/comm_fraction"]) == 2  # one per epoch
    assert all(0 < v <= 1 for v in ours["comm/comm_fraction"])

    keras_tb = _scalars(str(tmp_path / "tb" / "train"))
    # Our values reach Keras's TensorBoard through `logs` (we run before it).
    for tag in ("epoch_loss", "epoch_examples_per_sec", "epoch_comm_fraction"):
        assert len(keras_tb.get(tag, [])) == 2, (tag, sorted(keras_tb))
