"""The learner's work found in the tree being graded: its corpus, a script's function, a notebook's solution cell.
Each TODO's grader in the registry (`grade_<key>(repo, todo)`) starts here, then hands the learner's code on."""

import json
import tempfile
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.todos.registry import Todo
from minitrain.paths import DEFAULT_CORPUS_DIR, REPO
from minitrain.script import import_script


def corpus(repo: Path) -> Path:
    """The graded tree's corpus folder, generated when it is not there yet."""
    from minitrain.corpus import ensure_corpus
    folder = repo / DEFAULT_CORPUS_DIR.relative_to(REPO)
    ensure_corpus(folder)
    return folder


def function(module: types.ModuleType, name: str, missing: str) -> Callable:
    """`module.name`, or ExerciseError `missing` (which names the file and the signature expected)."""
    if not hasattr(module, name):
        raise ExerciseError(missing)
    return getattr(module, name)


@contextmanager
def solution_cell(repo: Path, todo: Todo, name: str) -> Iterator[tuple[Callable, Path]]:
    """The function `name` that the learner's solution cell of `todo` defines, run as a module from a temporary folder
    (yielded too: a grader's scratch space), which goes afterwards."""
    nb = json.loads((repo / todo.file).read_text())  # plain JSON: nbformat's import alone costs most of a second
    cells = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == todo.cell]
    if not cells:
        raise ExerciseError(f"{todo.file} has no cell with nbgrader grade_id {todo.cell!r}")
    source = cells[0]["source"]
    with tempfile.TemporaryDirectory(prefix="minitrain-grade-") as tmp:
        path = Path(tmp) / f"learner_{todo.key}.py"
        path.write_text((source if isinstance(source, str) else "".join(source)) + "\n")
        try:
            cell = import_script(path)
        except Exception as e:
            raise ExerciseError(f"the solution cell of {todo.file} does not run: {type(e).__name__}: {e}") from e
        yield function(cell, name, f"the solution cell of {todo.file} defines no {name}"), Path(tmp)
