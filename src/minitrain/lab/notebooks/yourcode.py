"""Show the learner the code a cell is about to run, read from the file on disk as it is now (the
learner's own edits included, never a stale import): the named functions, with the file and lines."""

import ast
import types
from pathlib import Path

from minitrain import script
from minitrain.lab.todos.blank import TodoNotDone, stub_in
from minitrain.paths import REPO, relative

SHOWN_IN = {"src/minitrain/data.py": "02", "src/minitrain/ddp.py": "03", "experiments/35-ddp-cpu/train.py": "04",
            "src/minitrain/timing.py": "04", "experiments/35-ddp-cpu/compare_states.py": "05"}  # where a TODO is asked
TRAINING_FILES = ("src/minitrain/data.py", "src/minitrain/ddp.py", "experiments/35-ddp-cpu/train.py",
                  "src/minitrain/timing.py")  # the TODOs a training run needs, in the order the notebooks ask them


def _resolved(path: str | Path) -> Path:
    return Path(path) if Path(path).is_absolute() else REPO / path


def _spans(path: Path, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """The first and last line (1-based) of each top-level function or class `names` in `path`."""
    text = path.read_text()
    lines = text.splitlines()
    found = {node.name: node for node in ast.parse(text).body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if missing := [name for name in names if name not in found]:
        raise LookupError(f"{relative(path)} has no top-level {', '.join(missing)}: was it renamed or deleted? "
                          "The lab calls it by that name")
    spans = []
    for name in names:
        node = found[name]
        start, end = min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno
        while end < len(lines) and lines[end].startswith((" ", "\t")) and lines[end].strip().startswith("#"):
            end += 1  # a comment closing the body (### END SOLUTION) is not in the syntax tree
        spans.append((start, end))
    return spans


def _first_blank(path: Path, spans: list[tuple[int, int]] | None = None) -> tuple[str, int] | None:
    """The first TODO still blank in `path` (within `spans` when given): its name and line."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if (what := stub_in(line)) and (spans is None or any(a <= number <= b for a, b in spans)):
            return what, number
    return None


def _stop_if_blank(path: Path, spans: list[tuple[int, int]] | None, where: str) -> None:
    if blank := _first_blank(path, spans):
        what, line = blank
        raise TodoNotDone(what, f"{relative(path)} at line {line} ({where})")


def your_code(path: str | Path, *names: str) -> str:
    """The source of the top-level functions or classes `names` in `path` (relative to the repository
    or absolute), each headed by the file and its line numbers."""
    path = _resolved(path)
    lines = path.read_text().splitlines()
    return "\n\n".join(f"# {relative(path)}, lines {start}-{end}\n" + "\n".join(lines[start - 1:end])
                       for start, end in _spans(path, names))


def your_todo(path: str | Path, *names: str) -> None:
    """Print your_code(path, *names); stop with TodoNotDone, in one line, when one of them is still blank."""
    print(your_code(path, *names))
    _stop_if_blank(_resolved(path), _spans(_resolved(path), names), "shown above")


def ready_to_train() -> None:
    """Stop with TodoNotDone, before any process starts, when a TODO a training run needs is still blank."""
    for path in TRAINING_FILES:
        _stop_if_blank(REPO / path, None, f"notebook {SHOWN_IN[path]} asks for it")


def ready_to_run(path: str, *names: str) -> None:
    """Stop with TodoNotDone, before any process starts, when one of `names` in `path` (relative to the repository:
    an earlier notebook's TODO that this cell's runs call) is still blank."""
    _stop_if_blank(_resolved(path), _spans(_resolved(path), names), f"notebook {SHOWN_IN[path]} asks for it")


def import_script(path: str | Path) -> types.ModuleType:
    """A script of the learner's (compare_states.py, train.py) imported as a module, fresh from disk."""
    return script.import_script(_resolved(path))
