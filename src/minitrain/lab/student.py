"""The student edition (`make student`): the lab's notebooks with every solution region cleared.

    python -m minitrain.lab.student --out build/student

It does to each notebook in notebooks/ what nbgrader's ClearSolutions and ClearOutput
preprocessors do: the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become
`# YOUR CODE HERE` and `raise NotImplementedError()`, indented like the marker, and every output
and execution count goes. It also opens the solution cells, which the committed notebooks keep
collapsed so that a learner tries before peeking. The graded cells stay as they are: run on the
blank, they fail with "not done yet".

nbgrader itself is not a dependency: it pins its own Jupyter stack (notebook 7, jupyterlab <5,
jupyter_client <9, jupyter_server, nbconvert, SQLAlchemy, alembic), which would move the
JupyterLab, nbclient, papermill and nbval this lab is tested with. Teachers who use nbgrader can
run `nbgrader generate_assignment` on the notebooks as they are: their cells carry nbgrader's
metadata (schema version 3).
"""

import argparse
import re
from pathlib import Path

import nbformat

from minitrain.paths import NOTEBOOKS_DIR, relative

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")


def clear_solution(source: str) -> str:
    """`source` with each solution region replaced by the stub (nbgrader's ClearSolutions)."""
    lines, inside = [], False
    for line in source.split("\n"):
        if BEGIN in line:
            if inside:
                raise ValueError(f"nested {BEGIN!r} in:\n{source}")
            inside = True
            indent = re.match(r"\s*", line).group(0)
            lines += [indent + stub for stub in STUB]
        elif END in line:
            inside = False
        elif not inside:
            lines.append(line)
    if inside:
        raise ValueError(f"{BEGIN!r} without {END!r} in:\n{source}")
    return "\n".join(lines)


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` with its solutions cleared, outputs removed, solution cells expanded."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # the timestamps of the last run
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.metadata.get("jupyter", {}).pop("source_hidden", None)
            if not cell.metadata.get("jupyter", True):
                del cell.metadata["jupyter"]
        cell.source = clear_solution(cell.source)
    return nb


def write_student_edition(out: Path, notebooks: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Every notebook of `notebooks` into `out` (never `notebooks` itself), cleared; return the paths."""
    if Path(out).resolve() == Path(notebooks).resolve():
        raise ValueError(f"--out {out} is the notebooks folder itself: choose another, e.g. build/student")
    Path(out).mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(notebooks.glob("*.ipynb")):
        nb = student_notebook(nbformat.read(path, as_version=4))
        nbformat.validate(nb)
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Write the student edition: notebooks with solutions cleared.")
    p.add_argument("--out", type=Path, required=True, help="folder to (re)create, e.g. build/student")
    args = p.parse_args(argv)
    written = write_student_edition(args.out)
    print(f"student edition: {len(written)} notebooks in {relative(args.out)}, solutions replaced by "
          f"{STUB[0]!r} and {STUB[1]!r}, outputs cleared")


if __name__ == "__main__":
    main()
