"""Show the learner the code a cell is about to run, read from the file on disk as it is now (the
learner's own edits included, never a stale import): the named functions, with the file and lines."""

import ast
import importlib.util
import types
from pathlib import Path

from minitrain.paths import REPO, relative


def your_code(path: str | Path, *names: str) -> str:
    """The source of the top-level functions or classes `names` in `path` (relative to the repository
    or absolute), each headed by the file and its line numbers."""
    path = Path(path) if Path(path).is_absolute() else REPO / path
    text = path.read_text()
    lines = text.splitlines()
    found = {node.name: node for node in ast.parse(text).body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if missing := [name for name in names if name not in found]:
        raise LookupError(f"{relative(path)} has no top-level {', '.join(missing)}: was it renamed or deleted? "
                          "The lab calls it by that name")
    parts = []
    for name in names:
        node = found[name]
        start, end = min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno
        while end < len(lines) and lines[end].startswith((" ", "\t")) and lines[end].strip().startswith("#"):
            end += 1  # a comment closing the body (### END SOLUTION) is not in the syntax tree
        parts.append(f"# {relative(path)}, lines {start}-{end}\n" + "\n".join(lines[start - 1:end]))
    return "\n\n".join(parts)


def import_script(path: str | Path) -> types.ModuleType:
    """A script of the learner's (compare_states.py, train.py) imported as a module, fresh from disk."""
    path = Path(path) if Path(path).is_absolute() else REPO / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
