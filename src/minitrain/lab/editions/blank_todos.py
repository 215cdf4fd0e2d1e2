"""pytest hooks of the student edition: a test or notebook cell that reaches a TODO still blank is skipped.

The stub raises the core's NotDone; a test that fails or errors with it, in its own process or in one it started
(minitrain.lab.todos.blank reads it), is reported as skipped in one line naming the TODO, and the rest of
that notebook skips; the run ends with the list of TODOs left. So a learner's `make test` passes blank, names
what is left, and fails only on a mistake; `make grade` gives each TODO its points. tests/conftest.py (all the
hooks) and notebooks/conftest.py (the skips) load them in the student edition only: in the reference a blank
stub is a bug, and fails.
"""

import re

import pytest

from minitrain.lab.todos import blank

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nbval colours its reports
UNREAD = re.compile(r"[{}]|\.\.\.")  # a source line's f-string, or pytest's cut of a long repr: not a TODO's name
GRADERS_TAIL = re.compile(r"\s*\(?(?:each )?still raises NotImplementedError.*")  # graders.running.STILL_BLANK
_blank_notebooks: dict[str, str] = {}  # a notebook's node id -> the TODO its run stopped at
_left: set[str] = set()  # the TODOs the skips named (with xdist: in the controller, from the workers' reports)


def blank_todo(text: str) -> str | None:
    """The TODO a failure's text (or a skip's message) says is still blank, or None."""
    text = ANSI.sub("", text).replace("\\'", "'")
    names = [GRADERS_TAIL.sub("", name).strip().rstrip(".:'") for name in blank.named(text)]
    whole = [name for name in names if not UNREAD.search(name)]
    return (whole or [UNREAD.split(name)[0].strip() or "a TODO" for name in names] or [None])[0]


def _notebook(item: pytest.Item) -> str | None:
    """The node id of the notebook a cell belongs to, or None for a test that is not a notebook's cell."""
    return item.parent.nodeid if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    notebook = _notebook(item)
    if notebook in _blank_notebooks:
        pytest.skip("an earlier cell of this notebook needs a TODO")  # pytest_runtest_makereport names it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    notebook = _notebook(item)
    if call.when == "setup" and report.skipped and notebook in _blank_notebooks:
        todo = _blank_notebooks[notebook]
    elif report.failed and call.when != "teardown" and (todo := blank_todo(str(report.longrepr))):
        if notebook is not None:
            _blank_notebooks[notebook] = todo
    else:
        return
    _, line, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (line or 0) + 1, blank.skipped(todo))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and (todo := blank_todo(report.longrepr[2])):
        _left.add(todo)


def pytest_terminal_summary(terminalreporter) -> None:
    """The list of what is left, after the skips: one line a TODO."""
    if _left:
        terminalreporter.section(f"TODOs {blank.TEXT}: `make grade` gives each its points")
        for todo in sorted(_left):
            terminalreporter.write_line(todo)
