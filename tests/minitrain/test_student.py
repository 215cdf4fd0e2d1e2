"""The exercises' notebooks and their student edition (`make student`): the committed notebooks carry
nbgrader's metadata, the student edition has every solution region replaced by the stub and no
outputs, and a student notebook's graded cell, executed in a kernel, fails with "not done yet"."""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from minitrain.lab import student
from minitrain.paths import EXPERIMENT_DIR, NOTEBOOKS_DIR

EXERCISES = {  # notebook -> (solution cell's grade_id, graded cell's grade_id)
    "02-sharding.ipynb": ("shard-indices", "test-shard-indices"),
    "03-wrapping.ipynb": ("rank1-holds-rank0-init", "test-rank1-holds-rank0-init"),
    "04-launch-and-timing.ipynb": ("my-timing-hook", "test-my-timing-hook"),
    "05-verification.ipynb": ("states-equivalent", "test-states-equivalent"),
}


def nbgrader_cells(nb) -> dict[str, nbformat.NotebookNode]:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}


def solution_lines(source: str) -> list[str]:
    """The non-blank lines between the solution markers."""
    inside, lines = False, []
    for line in source.splitlines():
        if student.BEGIN in line or student.END in line:
            inside = student.BEGIN in line
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    """`python -m minitrain.lab.student --out DIR`, as `make student` runs it."""
    out = tmp_path_factory.mktemp("student")
    proc = subprocess.run([sys.executable, "-m", "minitrain.lab.student", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "solutions replaced by '# YOUR CODE HERE' and 'raise NotImplementedError()'" in proc.stdout
    return out


@pytest.mark.parametrize("name", EXERCISES)
def test_committed_exercise_cells_carry_nbgrader_metadata(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    cells = nbgrader_cells(nb)
    solution_id, graded_id = EXERCISES[name]
    assert list(cells) == [solution_id, graded_id]  # one exercise a notebook, solution first
    assert cells[solution_id].metadata["nbgrader"] == {
        "grade": False, "grade_id": solution_id, "locked": False, "schema_version": 3, "solution": True,
        "task": False}
    graded = cells[graded_id].metadata["nbgrader"]
    assert graded.pop("points") > 0
    assert graded == {"grade": True, "grade_id": graded_id, "locked": True, "schema_version": 3,
                      "solution": False, "task": False}
    assert cells[solution_id].metadata["jupyter"] == {"source_hidden": True}  # opens collapsed
    assert len(solution_lines(cells[solution_id].source)) > 0
    order = [c.id for c in nb.cells]
    solution_at = order.index(cells[solution_id].id)
    assert order.index(cells[graded_id].id) == solution_at + 1
    before = nb.cells[solution_at - 1]
    assert before.cell_type == "markdown" and "collapsed" in before.source  # says so, asks to try first
    assert nb.cells[-1].cell_type == "markdown" and nb.cells[-1].source.startswith("## Takeaway")
    assert any("*Your guess:*" in c.source for c in nb.cells[:solution_at])


def test_clear_solution_keeps_the_indentation_and_the_rest():
    source = "def f():\n    \"\"\"doc\"\"\"\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\nx = f"
    assert student.clear_solution(source) == (
        "def f():\n    \"\"\"doc\"\"\"\n    # YOUR CODE HERE\n    raise NotImplementedError()\nx = f")
    with pytest.raises(ValueError, match="without"):
        student.clear_solution("### BEGIN SOLUTION\nx = 1")
    with pytest.raises(ValueError, match="nested"):
        student.clear_solution("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION")


def test_the_edition_refuses_to_write_over_the_notebooks(tmp_path):
    with pytest.raises(ValueError, match="is the notebooks folder itself"):
        student.write_student_edition(tmp_path, notebooks=tmp_path)  # a copy's folder: nothing tracked at risk


def test_the_student_edition_has_no_solution_and_no_output(edition):
    assert sorted(p.name for p in edition.glob("*.ipynb")) == sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
    for path in sorted(edition.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        text = path.read_text()
        assert student.BEGIN not in text and student.END not in text, path.name
        for cell in nb.cells:
            assert "execution" not in cell.metadata
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
    for name, (solution_id, graded_id) in EXERCISES.items():
        committed = nbgrader_cells(nbformat.read(NOTEBOOKS_DIR / name, as_version=4))
        cells = nbgrader_cells(nbformat.read(edition / name, as_version=4))
        source = cells[solution_id].source
        assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in source  # inside the function
        leftovers = set(solution_lines(committed[solution_id].source)) & {line.strip() for line in source.splitlines()}
        assert leftovers == set(), f"{name}: solution lines left in the student edition: {leftovers}"
        assert "jupyter" not in cells[solution_id].metadata  # the stub is shown, not collapsed
        assert cells[solution_id].metadata["nbgrader"] == committed[solution_id].metadata["nbgrader"]
        assert cells[graded_id].source == committed[graded_id].source


def up_to_the_graded_cell(nb, graded_id: str, *, self_contained: bool):
    """The notebook's cells up to its graded cell; `self_contained`: the solution and graded cells only."""
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    end = ids.index(graded_id) + 1
    nb.cells = nb.cells[end - 2:end] if self_contained else nb.cells[:end]
    return nb


@pytest.mark.parametrize("name", EXERCISES)
def test_a_student_graded_cell_fails_with_not_done_yet(edition, name, tmp_path, monkeypatch):
    """Executed with nbclient in a kernel (python3) in a temporary folder, cells in order up to the
    graded one. Notebook 04 runs its solution and graded cells alone (they import what they use):
    its 100-step training run is not needed to grade the hook, which gets its own 2-process run."""
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(edition / name, folder / name)
    out = tmp_path / "out"  # the committed 2-process run, as a fresh clone has it (05 reads it)
    out.mkdir()
    for file in ("run.json", "timings.jsonl", "state-rank-0.pt", "state-rank-1.pt"):
        shutil.copy(EXPERIMENT_DIR / file, out / file)
    monkeypatch.setenv("MINITRAIN_LAB_OUT", str(out))
    monkeypatch.setenv("MINITRAIN_LAB_SCRATCH", str(tmp_path / "scratch"))
    nb = up_to_the_graded_cell(nbformat.read(folder / name, as_version=4), EXERCISES[name][1],
                               self_contained=name.startswith("04"))
    client = NotebookClient(nb, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(folder)}})
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    error = [o for o in nb.cells[-1].outputs if o.output_type == "error"]
    assert error, f"{name}: the error came from another cell than the graded one:\n{info.value}"
    assert error[0].ename == "ExerciseError"
    assert error[0].evalue.startswith("not done yet:")
    assert all(not any(o.output_type == "error" for o in c.get("outputs", [])) for c in nb.cells[:-1])
