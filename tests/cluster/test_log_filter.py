"""`launch` output: TF start-up noise hidden by default, errors kept, joins timed."""

import io
import os
import sys
import textwrap

from tfdist_opt import cli
from tfdist_opt.launch import local as launcher
from tfdist_opt.launch import log_filter

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
CUINIT = (
    "E0000 00:00:1796237916.441030    6657 cuda_platform.cc:52] failed call to "
    "cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
ONEDNN = (
    "I0000 00:00:1796238661.800876   29463 port.cc:153] oneDNN custom "
    "operations are on. You may see slightly different numerical results"
)
TF_WARNING = (
    "W0000 00:00:1796237918.738233    6654 dataset.cc:997] Input of "
    "GeneratorDatasetOp::Dataset will not be optimized"
)
TF_ERROR = (
    "E0000 00:00:1796237952.730819    7028 base_collective_executor.cc:252] "
    "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC"
)

# A child that prints what a TF worker prints at start-up, then real output.
_CHILD = textwrap.dedent(f"""
    import os, sys
    print({ABSL!r}, file=sys.stderr)
    print({CUINIT!r}, file=sys.stderr)
    print({ONEDNN!r}, file=sys.stderr)
    print({TF_WARNING!r}, file=sys.stderr)
    print({TF_ERROR!r}, file=sys.stderr)
    print("tfdist_opt: built KerasMultiWorkerMirroredStrategy", file=sys.stderr)
    print("Traceback (most recent call last):", file=sys.stderr)
    print("level=" + os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset"))
""")


def test_filter_drops_only_known_start_up_lines_and_cpp_lines_below_the_level():
    f = log_filter.StartupNoiseFilter(nvidia_driver=False)
    for line in (ABSL + "\n", CUINIT, ONEDNN, TF_WARNING):
        assert not f.keep(line), line
    for line in (
        TF_ERROR,
        "F0000 00:00:1.5 1 check.cc:1] Check failed",
        "Traceback (most recent call last):",
        "ValueError: Invalid value for `num_packs`",
        "Epoch 1/3",
        "I0000 in a Python message, not a C++ log line",
        "WARNING: something else before absl::InitializeLog()",
    ):
        assert f.keep(line), line
    assert f.hidden == 4


def test_the_users_level_decides_which_cpp_lines_go():
    f = log_filter.StartupNoiseFilter(min_level=1, nvidia_driver=False)
    assert not f.keep(ONEDNN) and f.keep(TF_WARNING)
    f = log_filter.StartupNoiseFilter(min_level=0, nvidia_driver=False)
    assert f.keep(ONEDNN) and f.keep(TF_WARNING)
    f = log_filter.StartupNoiseFilter(min_level=3, nvidia_driver=False)
    assert f.keep(TF_ERROR)  # errors always show
    assert log_filter.min_log_level({"TF_CPP_MIN_LOG_LEVEL": "1"}) == 1
    assert log_filter.min_log_level({"TF_CPP_MIN_LOG_LEVEL": "x"}) == 0
    assert log_filter.min_log_level({}) == 0


def test_a_failed_cuinit_is_kept_on_a_host_with_an_nvidia_driver():
    f = log_filter.StartupNoiseFilter(nvidia_driver=True)
    assert f.keep(CUINIT)
    assert not f.keep(ABSL)


def test_quiet_env_sets_the_level_only_when_the_user_did_not():
    env, set_level = log_filter.quiet_env({"A": "1"})
    assert env == {"A": "1", "TF_CPP_MIN_LOG_LEVEL": "2"} and set_level
    env, set_level = log_filter.quiet_env({"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "0"} and not set_level


def _launch(quiet, env, monkeypatch, tmp_path):
    monkeypatch.setattr(log_filter, "has_nvidia_driver", lambda: False)
    child = tmp_path / "child.py"
    child.write_text(_CHILD)
    out, err = io.StringIO(), io.StringIO()
    result = launcher.run_local(
        [sys.executable, str(child)],
        2,
        env=env,
        stdout=out,
        stderr=err,
        startup_timeout=None,
        handle_signals=False,
        quiet=quiet,
    )
    assert result.returncode == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def test_quiet_launch_hides_noise_and_keeps_errors_and_decisions(monkeypatch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    out, err = _launch(True, env, monkeypatch, tmp_path)
    assert out.count("level=2") == 2
    for noise in (ABSL, "cuInit", ONEDNN, TF_WARNING):
        assert noise not in err
    for i in (0, 1):
        assert f"[worker {i}] {TF_ERROR}" in err
        assert f"[worker {i}] tfdist_opt: built KerasMultiWorkerMirroredStrategy" in err
        assert f"[worker {i}] Traceback (most recent call last):" in err
    assert "TF_CPP_MIN_LOG_LEVEL=2; --verbose shows them" in err
    assert "all 2 worker(s) finished (8 TensorFlow start-up line(s) hidden" in err


def test_quiet_launch_respects_the_users_level(monkeypatch, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")
    out, err = _launch(True, env, monkeypatch, tmp_path)
    assert out.count("level=1") == 2
    assert "TF_CPP_MIN_LOG_LEVEL=2" not in err
    assert ONEDNN not in err and err.count(TF_WARNING) == 2


def test_verbose_launch_passes_everything(monkeypatch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    out, err = _launch(False, env, monkeypatch, tmp_path)
    assert out.count("level=unset") == 2
    assert err.count(ABSL) == 2 and err.count("cuInit") == 4
    assert err.count(ONEDNN) == 2 and err.count(TF_WARNING) == 2
    assert "hidden" not in err


def test_cli_is_quiet_by_default_and_verbose_on_request(capfd, monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    code = [
        sys.executable,
        "-c",
        "import os; print('lvl', os.environ.get('TF_CPP_MIN_LOG_LEVEL', 'unset'))",
    ]
    assert cli.main(["launch", "-n", "1", "--", *code]) == 0
    assert "[worker 0] lvl 2" in capfd.readouterr().out
    assert cli.main(["launch", "-n", "1", "--verbose", "--", *code]) == 0
    assert "[worker 0] lvl unset" in capfd.readouterr().out


def test_launch_says_when_all_workers_joined():
    out, err = io.StringIO(), io.StringIO()
    child = textwrap.dedent("""
        import os, socket, time, json
        cfg = json.loads(os.environ["TF_CONFIG"])
        i = cfg["task"]["index"]
        port = int(cfg["cluster"]["worker"][i].rsplit(":", 1)[1])
        s = socket.socket(); s.bind(("", port)); s.listen()
        time.sleep(1.5)
    """)
    result = launcher.run_local(
        [sys.executable, "-c", child],
        2,
        stdout=out,
        stderr=err,
        startup_timeout=30,
        handle_signals=False,
    )
    assert result.returncode == 0, err.getvalue()
    lines = [ln for ln in err.getvalue().splitlines() if "joined" in ln]
    assert len(lines) == 1, err.getvalue()
    assert lines[0].startswith("[launch] all 2 workers joined (TF servers listening) ")
    assert lines[0].endswith(" s after start")
