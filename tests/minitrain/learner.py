"""A learner at work on a student tree: write code where a stub is, put the reference back, copy a tree."""

import importlib
import shutil
import textwrap
from pathlib import Path

import nbformat

from minitrain.lab.editions import student_edition
from minitrain.paths import EXPERIMENT_DIR, REPO

RUN_FILES = ("run.json", "timings.jsonl", "manifest.json", "scaling.png", "state-rank-0.pt", "state-rank-1.pt")


def copy_tree(tree: Path, out: Path) -> Path:
    shutil.copytree(tree, out)
    return out


def _replace_stub(source: str, what: str, code: str) -> str:
    lines = source.split("\n")
    marker = f"# YOUR CODE HERE ({what})"
    at = next(i for i, line in enumerate(lines) if line.strip() == marker)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    assert lines[at + 1].strip().startswith("raise NotDone(")
    body = [indent + line if line else line for line in code.strip("\n").split("\n")]
    return "\n".join(lines[:at] + body + lines[at + 2:])


def write(tree: Path, rel: str, what: str, code: str) -> None:
    """The learner replaces the stub about `what` in `rel` with `code` (indented like the stub)."""
    path = tree / rel
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if f"# YOUR CODE HERE ({what})" in c.source)
        cell.source = _replace_stub(cell.source, what, code)
        nbformat.write(nb, path)
    else:
        path.write_text(_replace_stub(path.read_text(), what, code))


def put_back_the_reference(tree: Path, rels: list[str]) -> None:
    """The reference files over the learner's: what a learner who pastes the solutions has."""
    for rel in rels:
        shutil.copy(REPO / rel, tree / rel)


def put_back_the_committed_run(tree: Path) -> None:
    """The committed run's artifacts as the learner's own run."""
    folder = tree / EXPERIMENT_DIR.relative_to(REPO)
    for name in RUN_FILES:
        shutil.copy(EXPERIMENT_DIR / name, folder / name)
    for name in ("single-process", "repeats"):
        shutil.copytree(EXPERIMENT_DIR / name, folder / name, dirs_exist_ok=True)


def regions(rel: str) -> list[str]:
    """The `what` of every solution region of a reference file (a plain marker: the function's name)."""
    path = REPO / rel
    if path.suffix == ".ipynb":
        sources = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    else:
        sources = [path.read_text()]
    found = []
    for source in sources:
        for line in student_edition.clear_solution(source).split("\n"):
            if line.strip().startswith("# YOUR CODE HERE (") and line.strip() not in source:
                found.append(line.strip()[len("# YOUR CODE HERE ("):-1])
    return found


def solutions(rel: str) -> dict[str, str]:
    """The reference's code in each named solution region of the .py file `rel`: what -> code, dedented."""
    found: dict[str, str] = {}
    what = None
    for line in (REPO / rel).read_text().split("\n"):
        if begin := student_edition.BEGIN_LINE.match(line):
            what, found[begin["what"]] = begin["what"], ""
        elif student_edition.END_LINE.match(line):
            found[what], what = textwrap.dedent(found[what]), None
        elif what:
            found[what] += line + "\n"
    return found


def import_written(tree: Path, rel: str, writes: dict[str, str], name: str, folder: Path):
    """The module `rel` of the student tree with the learner's `writes` (what -> code), imported as
    `name` from `folder` (put `folder` on sys.path first: spawned workers import it from there too)."""
    text = (tree / rel).read_text()
    for what, code in writes.items():
        text = _replace_stub(text, what, code)
    (folder / f"{name}.py").write_text(text)
    return importlib.import_module(name)
