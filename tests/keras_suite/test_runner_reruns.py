"""benchmarks/keras_tests.py reruns a file whose pytest process a signal killed, once."""

from benchmarks import keras_tests

JUNIT = '<testsuite><testcase classname="k.T" name="test_a"/></testsuite>'


def _fake(monkeypatch, outcomes):
    """`_run_pytest` replaced: each call pops (return code, writes junit?)."""
    calls = []

    def run(cmd, root, env, timeout_s):
        rc, writes = outcomes[len(calls)]
        calls.append(rc)
        if writes:
            with open(cmd[cmd.index("--junitxml") + 1], "w") as f:
                f.write(JUNIT)
        return rc, "Fatal Python error: Segmentation fault" if rc == -11 else ""

    monkeypatch.setattr(keras_tests, "_run_pytest", run)
    return calls


def test_a_crashed_file_runs_once_more_and_the_crash_is_kept(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, [(-11, False), (0, True)])
    result = keras_tests.run_file(str(tmp_path), "k_test.py", "plain", 60)
    assert calls == [-11, 0]
    assert result["tests"] == {"T::test_a": {"outcome": "passed", "message": ""}}
    assert result["crashed_first"]["returncode"] == -11
    assert "Segmentation fault" in result["crashed_first"]["output_tail"]


def test_a_second_crash_is_reported_not_retried_again(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, [(-11, False), (-11, False), (0, True)])
    result = keras_tests.run_file(str(tmp_path), "k_test.py", "plain", 60)
    assert calls == [-11, -11]
    assert result["tests"] == {} and result["returncode"] == -11
    assert "Segmentation fault" in result["output_tail"]


def test_failing_tests_are_not_rerun(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, [(1, True), (0, True)])
    result = keras_tests.run_file(str(tmp_path), "k_test.py", "plain", 60)
    assert calls == [1] and "crashed_first" not in result
