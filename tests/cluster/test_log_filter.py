"""`launch` output: TF start-up noise hidden by default, errors kept, joins timed."""

import io
import os
import sys
import textwrap

from tfdist_opt import cli
from tfdist_opt.cluster import launcher
from tfdist_opt.cluster import log_filter

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
CUINIT = ("E0000 00:00:1796237916.441030    6657 cuda_platform.cc:52] failed call to "
          "cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
TF_ERROR = ("E0000 00:00:1796237952.730819    7028 base_collective_executor.cc:252] "
            "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC")

# A child that prints what a TF worker prints at start-up, then real output.
_CHILD = textwrap.dedent(f"""
    import os, sys
    print({ABSL!r}, file=sys.stderr)
    print({CUINIT!r}, file=sys.stderr)
    print({TF_ERROR!r}, file=sys.stderr)
    print("tfdist_opt: built KerasMultiWorkerMirroredStrategy", file=sys.stderr)
    print("Traceback (most recent call last):", file=sys.stderr)
    print("level=" + os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset"))
""")


def test_filter_drops_only_known_start_up_lines():
    f = log_filter.StartupNoiseFilter(nvidia_driver=False)
    assert not f.keep(ABSL + "\n")
    assert not f.keep(CUINIT)
    for line in (TF_ERROR, "Traceback (most recent call last):",
                 "ValueError: Invalid value for `num_packs`", "Epoch 1/3",
                 "I0000 00:00:1.0 grpc_server_lib.cc:467] Started server",
                 "WARNING: something else before absl::InitializeLog()"):
        assert f.keep(line), line
    assert f.hidden == 2


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
    result = launcher.run_local([sys.executable, str(child)], 2, env=env,
                                stdout=out, stderr=err, startup_timeout=None,
                                handle_signals=False, quiet=quiet)
    assert result.returncode == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def test_quiet_launch_hides_noise_and_keeps_errors_and_decisions(monkeypatch, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CPP_MIN_LOG_LEVEL"}
    out, err = _launch(True, env, monkeypatch, tmp_path)
    assert out.count("level=2") == 2
    assert ABSL not in err and "cuInit" not in err
    for i in (0, 1):
        assert f"[worker {i}] {TF_ERROR}" in err
        assert f"[worker {i}] tfdist_opt: built KerasMultiWorkerMirroredStrategy" in err
        assert f"[worker {i}] Traceback (most recent call last):" in err
    assert "TF_CPP_MIN_LOG_LEVEL=2; --verbose shows them" in err
    assert "all 2 worker(s) finished (4 TensorFlow start-up line(s) hidden" in err


def test_quiet_launch_respects_the_users_level(monkeypatch, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")
    out, err = _launch(True, env, monkeypatch, tmp_path)
    assert out.count("level=1") == 2
    assert "TF_CPP_MIN_LOG_LEVEL=2" not in err


def test_verbose_launch_passes_everything(monkeypatch, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CPP_MIN_LOG_LEVEL"}
    out, err = _launch(False, env, monkeypatch, tmp_path)
    assert out.count("level=unset") == 2
    assert err.count(ABSL) == 2 and err.count("cuInit") == 4
    assert "hidden" not in err


def test_cli_is_quiet_by_default_and_verbose_on_request(capfd, monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    code = [sys.executable, "-c", "import os; print('lvl', os.environ.get("
            "'TF_CPP_MIN_LOG_LEVEL', 'unset'))"]
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
    result = launcher.run_local([sys.executable, "-c", child], 2, stdout=out,
                                stderr=err, startup_timeout=30,
                                handle_signals=False)
    assert result.returncode == 0, err.getvalue()
    lines = [ln for ln in err.getvalue().splitlines() if "joined" in ln]
    assert len(lines) == 1, err.getvalue()
    assert lines[0].startswith("[launch] all 2 workers joined (TF servers listening) ")
    assert lines[0].endswith(" s after start")
