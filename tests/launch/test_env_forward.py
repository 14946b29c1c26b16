"""Which launcher variables every task gets (`--env`, TFDIST_OPT_*, TF_*)."""

import pytest

from tfdist_opt.launch import env_forward


def test_forwards_our_prefixes_never_tf_config_and_env_flags_win():
    environ = {
        "TFDIST_OPT_COMPRESSION": "bf16",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_CONFIG": "{}",
        "HOME": "/root",
        "MY": "x",
    }
    flags = env_forward.parse_env_flags(["MY", "DATA=/d", "TF_CPP_MIN_LOG_LEVEL=0"], environ)
    assert env_forward.forwarded(environ, flags) == {
        "TFDIST_OPT_COMPRESSION": "bf16",
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "MY": "x",
        "DATA": "/d",
    }
    assert env_forward.describe({"B": "1", "A": "2"}) == "forwarding A, B"
    assert env_forward.describe({}) == ""


@pytest.mark.parametrize(
    "item, match",
    [
        ("UNSET", r"UNSET is not set in the launcher's environment"),
        ("1BAD=x", r"Received: --env '1BAD=x'"),
        ("TF_CONFIG={}", r"TF_CONFIG is built for each task"),
    ],
)
def test_bad_env_flags_are_named(item, match):
    with pytest.raises(ValueError, match=match):
        env_forward.parse_env_flags([item], {})


def test_local_launch_sets_env_flags_in_every_task(tmp_path, monkeypatch, capfd):
    import sys
    from tfdist_opt.cli import launch as cli

    monkeypatch.setenv("MY_VALUE", "42")
    code = cli.main(
        [
            "-n",
            "2",
            "--startup-timeout",
            "0",
            "--env",
            "MY_DATA_DIR=/data",
            "--env",
            "MY_VALUE",
            "--",
            sys.executable,
            "-c",
            "import os;print(os.environ['MY_DATA_DIR'], os.environ['MY_VALUE'])",
        ]
    )
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "[worker 0] /data 42" in out and "[worker 1] /data 42" in out
    assert "setting MY_DATA_DIR, MY_VALUE (--env)" in err


def test_env_with_slurm_or_host_lists_is_named(capsys):
    from tfdist_opt.cli import launch as cli

    assert cli.main(["--slurm", "--env", "A=1", "--", "python", "t.py"]) == 2
    assert "`--env` with --slurm" in capsys.readouterr().err
    assert cli.main(["--workers", "h1:1,h2:1", "--env", "A=1", "--", "python", "t.py"]) == 2
    assert "`--env` with a host list" in capsys.readouterr().err
