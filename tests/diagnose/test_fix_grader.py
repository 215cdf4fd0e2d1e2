"""Notebook 16's fix grader (fix16a-c) on real ranks: the reference's fixes and right ones in other forms pass, a
fix missing or unchanged stops before any process starts, and each wrong fix fails with its mistake named. The
student edition leaves this file out: fix_mistakes.py holds near-answers."""

from pathlib import Path

import pytest
import torch

from fix_mistakes import RIGHT, WRONG
from minitrain.lab.grading.graders import fixes
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.todos.blank import told
from minitrain.lab.todos.registry import BY_KEY, Todo
from minitrain.paths import REPO
from minitrain.todo import NotDone

FIX_TODOS = [t for t in BY_KEY.values() if t.grader == "fixes:grade_fix"]


def tree(tmp_path: Path, todo: Todo, fixed: str | None) -> Path:
    """A graded tree holding the broken script and, unless None, `fixed` as the learner's fix."""
    (tmp_path / todo.file).parent.mkdir(parents=True)
    (tmp_path / todo.starts_as).write_text((REPO / todo.starts_as).read_text())
    if fixed is not None:
        (tmp_path / todo.file).write_text(fixed)
    return tmp_path


def edited(todo: Todo, old: str, new: str) -> str:
    text = (REPO / todo.starts_as).read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {todo.starts_as}"
    return text.replace(old, new)


def todo_of(script: str) -> Todo:
    return BY_KEY[f"fix16{script[-4]}"]


@pytest.mark.parametrize("todo", FIX_TODOS, ids=lambda t: t.key)
def test_the_reference_fix_passes(todo):
    assert fixes.grade_fix(REPO, todo).startswith(f"{Path(todo.starts_as).name} fixed: on 2 ranks it runs to its end")


@pytest.mark.parametrize("name", RIGHT)
def test_a_right_fix_in_another_form_passes(tmp_path, name):
    script, old, new = RIGHT[name]
    todo = todo_of(script)
    assert fixes.grade_fix(tree(tmp_path, todo, edited(todo, old, new)), todo).startswith(f"{script} fixed")


def no_process(*args, **kwargs):
    raise AssertionError("a process was started")


@pytest.mark.parametrize("state", ["missing", "unchanged"])
def test_a_fix_missing_or_unchanged_stops_before_any_process_starts(tmp_path, monkeypatch, state):
    monkeypatch.setattr(fixes, "spawn_workers", no_process)
    todo = FIX_TODOS[0]
    with pytest.raises(NotDone) as stop:
        fixes.grade_fix(tree(tmp_path, todo, None if state == "missing" else (REPO / todo.starts_as).read_text()), todo)
    assert told(stop.value) == f"not done yet: the fix of run_a.py ({todo.file} is {state})"


@pytest.mark.parametrize("name", WRONG)
def test_each_wrong_fix_is_named(tmp_path, name):
    script, old, new, named = WRONG[name]
    todo = todo_of(script)
    with pytest.raises(ExerciseError) as wrong:
        fixes.grade_fix(tree(tmp_path, todo, edited(todo, old, new)), todo)
    assert named in str(wrong.value), str(wrong.value)
    assert str(wrong.value).startswith(f"your fixed/{script}")


def test_a_hang_is_named_with_its_rank_and_line(monkeypatch):
    """The broken run_c as a fix: a rank waits in a collective no other rank calls; the hang report names it."""
    monkeypatch.setattr(fixes, "COLLECTIVE_TIMEOUT_S", 2.0)
    todo = todo_of("run_c.py")
    with pytest.raises(ExerciseError, match=r"^run_c\.py on 2 ranks failed: hangs at run_c\.py:\d+ on rank \d \(waits in "):
        fixes.trained(REPO / todo.starts_as, 2, None)


def test_a_longer_timeout_is_stopped_at_the_limit(tmp_path):
    """The hang hidden behind a longer collective timeout (a symptom hidden): the run is stopped, nothing left."""
    todo = todo_of("run_c.py")
    fixed = tree(tmp_path, todo, edited(todo, "SEED = int(", "os.environ['MINITRAIN_COLLECTIVE_TIMEOUT'] = '600'\nSEED = int("))
    with pytest.raises(ExerciseError, match=r"^your fixed/run_c\.py on 2 ranks did not end within 4 s and was stopped"):
        fixes.trained(fixed / todo.file, 2, None, "your fixed/run_c.py", limit_s=4.0)


def test_weights_are_compared_relative_to_their_size():
    clean = fixes.Trained(3, 2.0, {"w": torch.ones(100)})
    assert fixes.fix_mistake(clean, fixes.Trained(3, 2.0, {"w": torch.ones(100) * (1 + 5e-4)})) is None
    assert "differ from one process's by 2.0e-03" in fixes.fix_mistake(
        clean, fixes.Trained(3, 2.0, {"w": torch.ones(100) * (1 + 2e-3)}))
    assert fixes.difference(clean, fixes.Trained(3, 2.0, {"v": torch.ones(100)})) == float("inf")
    assert fixes.difference(clean, fixes.Trained(3, 2.0, {"w": torch.full((100,), float("nan"))})) == float("inf")
