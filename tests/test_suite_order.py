"""tests/conftest.py's file order: longest first, waiting files beside process-starting ones."""

from tests import conftest


def test_a_waiting_file_runs_right_after_a_process_starting_one():
    wait = conftest._WAITING[0]  # pylint: disable=protected-access
    files = {"a.py": (90, True), "b.py": (80, True), "c.py": (60, False),
             "d.py": (50, True), "e.py": (1, False), wait: (70, True)}
    assert conftest.file_order(files) == ["a.py", "b.py", "c.py", "d.py", wait, "e.py"]


def test_waiting_files_left_over_go_last():
    waits = list(conftest._WAITING[:2])  # pylint: disable=protected-access
    files = {"a.py": (90, True), waits[0]: (70, True), waits[1]: (60, True)}
    assert conftest.file_order(files) == ["a.py", *waits]
