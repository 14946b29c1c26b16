"""Gradient features on 2 real workers (RING over 127.0.0.1) vs one process.

One cluster launch trains four variants (see scripts/grad_train.py):
* accum (opt_strategy(grad_accum=4, bytes_per_pack="auto")): equals the
  single-process step at the accumulated batch to rel 1e-5, iterations
  advance once per 4 micro-steps, both workers identical;
* pack (auto buckets) vs plain (TF's one pack): bit-identical weights;
* bf16: weight updates within precision.compression_rtol of plain, not equal;
* streams (pieces of 64 KB across tensor boundaries, two collectives in
  flight) vs plain: bit-identical weights; the server sends RecvBuf chunks
  whole (recv_buf_max_chunk=-1, set by opt_strategy);
every variant checked on both tasks, which end bit-identical.
"""

import os
import runpy

import numpy as np
import pytest

from tests.multiworker import harness
from tfdist_opt.gradients.collectives import precision

# Its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = pytest.mark.grappler

SCRIPT = os.path.join("tests", "multiworker", "scripts", "grad_train.py")


def _load(path):
    with np.load(path) as z:
        ws = [z[f"w{i}"] for i in range(len(z.files) - 1)]
        return ws, int(z["iterations"])


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.mark.multiworker
def test_gradients_on_two_workers(tmp_path):
    results = harness.run_workers(2, [SCRIPT, "--out", str(tmp_path)], timeout_s=300)
    for r in results:
        assert r.returncode == 0, f"worker {r.index}:\n{r.output[-4000:]}"
    script = runpy.run_path(SCRIPT)
    script["reference"](str(tmp_path))  # one process, one device: this one
    assert "TUNED_BYTES_PER_PACK=" in results[0].output
    assert "TUNED_BYTES_PER_PACK=None" not in results[0].output  # autotune ran
    assert "RECV_BUF_MAX_CHUNK=-1" in results[0].output

    big, big_it = _load(tmp_path / "big_ref.npz")
    single_plain, steps = _load(tmp_path / "plain_ref.npz")
    w_init = script["init_weights"]()
    for task in (0, 1):
        acc, it = _load(tmp_path / f"accum_{task}.npz")
        assert it == big_it == 3
        assert _max_rel(acc, big) <= 1e-5
    w0, _ = _load(tmp_path / "accum_0.npz")
    w1, _ = _load(tmp_path / "accum_1.npz")
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)

    # Every variant on both tasks: the tasks agree bit for bit (one
    # all-reduced update applied everywhere), and each task's weights pass
    # the variant's check.
    loaded = {
        (name, task): _load(tmp_path / f"{name}_{task}.npz")
        for name in ("plain", "pack", "bf16", "streams")
        for task in (0, 1)
    }
    for name in ("plain", "pack", "bf16", "streams"):
        (a, it_a), (b, it_b) = loaded[(name, 0)], loaded[(name, 1)]
        assert it_a == it_b == steps, name
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=name)
    for task in (0, 1):
        mw_plain, pack, bf16, streams = (
            loaded[(n, task)][0] for n in ("plain", "pack", "bf16", "streams")
        )
        for a, b in zip(pack, mw_plain):  # packing changes no bit
            np.testing.assert_array_equal(a, b)
        for a, b in zip(streams, mw_plain):  # nor do streamed pieces
            np.testing.assert_array_equal(a, b)
        assert any(not np.array_equal(a, b) for a, b in zip(pack, w_init))  # trained
        assert _max_rel(mw_plain, single_plain) <= 1e-5  # 2 workers == 1 process
        d_ref = [p - w for p, w in zip(mw_plain, w_init)]
        d_bf = [p - w for p, w in zip(bf16, w_init)]
        assert _max_rel(d_bf, d_ref) <= precision.compression_rtol("bfloat16", 2, steps)
        assert any(not np.array_equal(a, b) for a, b in zip(bf16, mw_plain))
