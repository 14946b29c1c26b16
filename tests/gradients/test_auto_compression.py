"""`tfdist_opt.gradients.autotune.auto_compression`: which compression pays on a link.

The decision with numbers (a 1 Gbit/s link and the benchmark mlp's 23 MB of
gradients -> compressed; a loopback-like rate -> none), the start line (a
lossy pick says so), bad input; and, where emulated hosts can be made, the
link measured between two hosts on a 1 Gbit/s link leads to a compressed
pick for those 23 MB.
"""

import json
import sys

import pytest

from tfdist_opt.gradients.autotune import auto_compression as ac

MLP_GRAD_BYTES = 23.2e6  # 768-2048-2048-10: 5.8M float32 parameters
MLP_COMPUTE_S = 0.065  # its one-process step at batch 32 on a 2-core host


def test_a_1gbit_link_and_23mb_of_gradients_pick_a_compressed_one():
    choice, reason = ac.choose_compression(125e6, MLP_GRAD_BYTES, MLP_COMPUTE_S)
    assert choice == "bf16", reason
    assert "predicted step none 251 ms" in reason, reason
    # PowerSGD, when its factors are known (rank 4: ~150 KB), wins further.
    choice, _ = ac.choose_compression(125e6, MLP_GRAD_BYTES, MLP_COMPUTE_S, powersgd_bytes=150e3)
    assert choice == "powersgd"


def test_loopback_like_rates_pick_none():
    for rate in (2e9, 5e9, 17e9 / 8):
        choice, reason = ac.choose_compression(
            rate, MLP_GRAD_BYTES, MLP_COMPUTE_S, powersgd_bytes=150e3
        )
        assert choice == "none", (rate, reason)


def test_lossier_needs_the_margin_and_can_be_refused():
    # bf16 a little faster only (< 10%): stays exact.
    choice, _ = ac.choose_compression(1e9, 4e6, 0.1)
    assert choice == "none"
    assert (
        ac.choose_compression(125e6, MLP_GRAD_BYTES, MLP_COMPUTE_S, allow_lossy=False)[0] == "none"
    )


def test_the_start_line_says_lossy():
    line = ac.start_line(*ac.choose_compression(125e6, MLP_GRAD_BYTES, MLP_COMPUTE_S))
    assert "picked bf16 (LOSSY:" in line and "bfloat16" in line
    assert "(exact)" in ac.start_line("none", "r")
    assert "rank-2 PowerSGD" in ac.start_line("powersgd", "r", rank=2)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"link_bytes_per_s": 0}, "Invalid value for `link_bytes_per_s`"),
        ({"grad_bytes": -1}, "Invalid value for `grad_bytes`"),
        ({"compute_s": "1"}, "Received: compute_s='1'"),
        ({"min_gain": -0.1}, "Invalid value for `min_gain`"),
    ],
)
def test_bad_input_names_the_field(kwargs, message):
    args = {"link_bytes_per_s": 125e6, "grad_bytes": 1e6, "compute_s": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        ac.choose_compression(**args)


_SCRIPT = """
import json, os
import tfdist_opt
from tfdist_opt.gradients.autotune import auto_compression as ac
strategy = tfdist_opt.opt_strategy()
rate = ac.measure_link(strategy, nbytes=4 << 20, iters=3)
choice, reason = ac.choose_compression(rate, %r, %r)
print("RESULT " + json.dumps({"rate": rate, "choice": choice, "reason": reason}),
      flush=True)
""" % (MLP_GRAD_BYTES, MLP_COMPUTE_S)


def test_a_measured_1gbit_link_picks_a_compressed_one():
    from tests.hosts import testbed as testbed_lib

    reason = testbed_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)
    with testbed_lib.TestBed(2, rate="1gbit") as bed:
        workers = [f"{h.address}:2222" for h in bed.hosts]
        procs = []
        for i, host in enumerate(bed.hosts):
            env = bed.env(
                {
                    "TF_CONFIG": json.dumps(
                        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
                    )
                }
            )
            procs.append(bed.popen(host, [sys.executable, "-c", _SCRIPT], env=env))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=120)[0])
            except Exception:  # pylint: disable=broad-except
                bed.kill(p)
                raise
    results = [
        json.loads(line.split("RESULT ", 1)[1])
        for out in outs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]
    assert len(results) == 2, outs[0][-3000:]
    # Both workers measured the same rate (agreed) and took the same pick.
    assert results[0] == results[1]
    r = results[0]
    assert 20e6 < r["rate"] <= 1.05 * 125e6, r
    assert r["choice"] in ("bf16", "powersgd"), r["reason"]


def test_one_host_picks_none_at_once_and_says_why(strategy, capfd):
    import keras
    import numpy as np

    from tfdist_opt.gradients.binding import hooks
    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.options import GradientOptions

    original = keras_binding.options_of(strategy)
    keras_binding.attach(strategy, GradientOptions(compression="auto", hooked=True))
    try:
        with strategy.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile(keras.optimizers.SGD(0.1), "mse")
        assert hooks.state_of(model.optimizer).options.compression == "auto"
        x = np.ones((8, 4), "float32")
        model.fit(x, np.zeros((8, 2), "float32"), batch_size=4, epochs=1, verbose=0)
    finally:
        keras_binding.attach(strategy, original)
    assert hooks.state_of(model.optimizer).options.compression == "none"
    err = capfd.readouterr().err
    assert (
        "tfdist_opt: compression=auto picked none (exact): one host: no gradient crosses a link"
        in err
    )
