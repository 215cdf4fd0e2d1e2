"""What the tests of notebooks 18 and 19's graders share: a reference file with a learner's edits made in it, and the
check that a blank stub starts no process."""

from collections.abc import Callable
from pathlib import Path

import pytest

from minitrain.lab.grading.graders import running
from minitrain.lab.todos.blank import stub
from minitrain.todo import NotDone


def edited(reference: str, *edits: str) -> str:
    """`reference` with each (old, new) pair of `edits` replaced, each old text found exactly once."""
    text = reference
    for old, new in zip(edits[::2], edits[1::2]):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def blank_starts_no_process(grade: Callable[[Path], str], path: Path, reference: str, line: str, what: str,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`reference` with `line` made the stub of `what`, written to `path`: grading it raises NotDone naming `what`
    before any rank starts."""
    path.write_text("from minitrain.todo import NotDone\n" + edited(reference, line, f"        {stub(what)}\n"))

    def no_process(*args, **kwargs):
        raise AssertionError("the blank stub started ranks")
    monkeypatch.setattr(running, "spawn_ranks", no_process)
    with pytest.raises(NotDone, match=what):
        grade(path)
