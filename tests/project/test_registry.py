"""The TODO registry against what it declares: each stub in its file, each grader resolvable, every solution region
of the reference in some TODO, and README's and TEACHER.md's tables row by row."""

import ast
import inspect
import json
import re
import subprocess

import pytest

from minitrain.lab.todos.registry import BY_KEY, PARTS, TODOS, Todo
from minitrain.paths import REPO

ROW = re.compile(r"^\| (?P<key>[A-G]\d?|(?:ex|fix)\d\d[a-z]?(?:-[a-z])?) \|(?P<rest>.*)\|$", re.M)
SOLUTION = re.compile(r"^\s*### BEGIN SOLUTION", re.M)  # a solution region's first line


def _cells(path: str) -> dict[str, str]:
    """A notebook's cells by nbgrader grade_id: their source."""
    nb = json.loads((REPO / path).read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in nb["cells"]
            if "grade_id" in c.get("metadata", {}).get("nbgrader", {})}


def _definitions(path: str) -> dict[str, str]:
    """A Python file's top-level functions and classes: their source."""
    text = (REPO / path).read_text()
    return {n.name: ast.get_source_segment(text, n) + "\n" + "\n".join(
        text.splitlines()[n.end_lineno:n.end_lineno + 1])  # a closing `### END SOLUTION` comment is not in the node
        for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("todo", TODOS, ids=lambda t: t.key)
def test_a_todo_is_declared_whole(todo: Todo) -> None:
    assert todo.part in PARTS, f"{todo.key}: part {todo.part!r} is not one of {list(PARTS)}"
    assert all(n in BY_KEY and todo.key not in BY_KEY[n].needs for n in todo.needs), \
        f"{todo.key}: needs {todo.needs}: each a TODO of the registry that does not need it back"
    grader = todo.grader_function()
    assert list(inspect.signature(grader).parameters) == ["repo", "todo"], \
        f"{todo.key}: its grader {todo.grader} takes {inspect.signature(grader)}, not (repo, todo)"
    for rel in todo.teacher_files:
        assert (REPO / rel).is_file(), f"{todo.key}: teacher file {rel} does not exist"
    if todo.file.endswith("/"):
        assert (REPO / todo.file).is_dir() and not todo.stub, todo.key
        return
    found = _cells(todo.file) if todo.cell else _definitions(todo.file)
    for name in [todo.cell] if todo.cell else todo.stub:
        assert name in found, f"{todo.key}: {todo.file} has no {'cell with grade_id ' if todo.cell else ''}{name}"
        if todo.key != "G":  # Block G's cell is the learner's paragraph: a literal, no solution region
            assert SOLUTION.search(found[name]), f"{todo.key}: {name} in {todo.file} holds no solution region"


def test_every_solution_region_is_a_todos() -> None:
    """A region the student edition blanks, where no TODO points, would be graded by nothing."""
    declared = {(t.file, name) for t in TODOS for name in ([t.cell] if t.cell else t.stub)}
    files = subprocess.run(["git", "ls-files", "src", "experiments", "notebooks"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    stray = []
    for rel in files:
        if rel.endswith(".py") and SOLUTION.search((REPO / rel).read_text()):
            stray += [(rel, n) for n, source in _definitions(rel).items() if SOLUTION.search(source)]
        elif rel.endswith(".ipynb") and "### BEGIN SOLUTION" in (REPO / rel).read_text():
            stray += [(rel, i) for i, source in _cells(rel).items() if SOLUTION.search(source)]
    assert [s for s in stray if s not in declared] == []


def _table(path: str, header: str) -> dict[str, list[str]]:
    """The rows of the table under `header` in `path`, by key: their cells."""
    text = (REPO / path).read_text()
    table = text[text.index(header):].split("\n\n")[0]
    return {m["key"]: [c.strip() for c in m["rest"].split("|")] for m in ROW.finditer(table)}


def _keys(row_key: str) -> list[str]:
    """The TODOs a README row stands for: "ex16a-c" is ex16a, ex16b and ex16c."""
    if "-" not in row_key:
        return [row_key]
    first, last = row_key.split("-")
    return [first[:-1] + chr(c) for c in range(ord(first[-1]), ord(last) + 1)]


def test_readme_table_is_the_registry() -> None:
    rows = _table("README.md", "| TODO | file | what you write | notebook | points |")
    covered = [k for row in rows for k in _keys(row)]
    assert covered == list(BY_KEY), f"README.md's table has rows for {covered}; the registry {list(BY_KEY)}"
    for row, (file, _, notebook, points) in rows.items():
        todos = [BY_KEY[k] for k in _keys(row)]
        want = [f"`{todos[0].file}`", todos[0].notebook, str(sum(t.points for t in todos))]
        assert [file, notebook, points] == want and len({(t.file, t.notebook) for t in todos}) == 1, \
            f"README.md's row {row}: {[file, notebook, points]}; the registry says {want}"


@pytest.mark.skipif(not (REPO / "TEACHER.md").exists(), reason="the student edition has no TEACHER.md")
def test_teacher_table_is_the_registry() -> None:
    rows = _table("TEACHER.md", "| key | file | what the learner writes | points | graded by |")
    assert list(rows) == list(BY_KEY), f"TEACHER.md's table has rows {list(rows)}; the registry {list(BY_KEY)}"
    for todo in TODOS:  # the second column is prose for teachers (README's is the learner's)
        file, _, points, graded_by = rows[todo.key]
        want = [f"`{todo.file}`", str(todo.points), todo.graded_by]
        assert [file, points, graded_by] == want, \
            f"TEACHER.md's row {todo.key}: {[file, points, graded_by]}; the registry says {want}"
    total = sum(t.points for t in TODOS)
    assert f"Total: {total} points" in (REPO / "TEACHER.md").read_text(), f"TEACHER.md's total is not {total} points"
