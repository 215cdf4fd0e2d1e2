"""The student edition (`make student`): a whole repository with every solution region (in .py files
and notebooks) replaced by the stub, notebooks cleared, no reference-run artifact, no teacher's kit;
the reference notebooks keep nbgrader's metadata."""

import ast
import difflib
import fnmatch
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

import nbformat
import pytest

from minitrain.lab.editions import student_edition
from minitrain.lab.grading import gradebook
from minitrain.lab.teaching import refresh
from minitrain.lab.todos import blank
from minitrain.lab.todos import registry
from minitrain.paths import NOTEBOOKS_DIR, REPO
from minitrain.todo import NotDone

EXERCISES = {  # notebook -> (solution cell's grade_id, graded cell's grade_id)
    "03-wrapping.ipynb": ("rank1-holds-rank0-init", "test-rank1-holds-rank0-init"),
    "04-launch-and-timing.ipynb": ("my-timing-hook", "test-my-timing-hook"),
    "06-scaling-and-report.ipynb": ("lesson-notes", "test-lesson-notes"),
    "16-when-it-breaks.ipynb": ("diagnose", "test-diagnose"),
}
# The sheet's files whose regions this repository holds, and one `what` each must have
SHEET_REGIONS = {"src/minitrain/ddp.py": "Block A: init_distributed",
                 "experiments/35-ddp-cpu/train.py": "Block C: train_step",
                 "src/minitrain/data.py": "Block B: make_shard's split",
                 "src/minitrain/timing.py": "Block D: BarrierTimer.before_backward",
                 "experiments/35-ddp-cpu/compare_states.py": "Block E: states_equivalent"}


def nbgrader_cells(nb) -> dict[str, nbformat.NotebookNode]:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}


def region_lines(source: str) -> list[str]:
    """The non-blank lines inside solution regions."""
    inside, lines = False, []
    for line in source.splitlines():
        if student_edition.BEGIN_LINE.match(line) or student_edition.END_LINE.match(line):
            inside = bool(student_edition.BEGIN_LINE.match(line))
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_exercise_cells_carry_nbgrader_metadata(name):
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
    assert region_lines(cells[solution_id].source)


def test_clear_solution_writes_the_stub_at_the_markers_indentation():
    source = ('def f():\n    """doc"""\n    ### BEGIN SOLUTION: Block X: f\'s "body"\n    return 1\n'
              "    ### END SOLUTION\nx = f")
    cleared = student_edition.clear_solution(source)
    assert cleared == (f'{blank.IMPORT}\n\n\ndef f():\n    """doc"""\n    # YOUR CODE HERE (Block X: f\'s "body")\n'
                       '    raise NotDone("Block X: f\'s \\"body\\"")\nx = f')
    with pytest.raises(NotDone) as raised:
        namespace: dict = {}
        exec(cleared, namespace)
        namespace["f"]()
    assert raised.value.what == 'Block X: f\'s "body"'


def test_the_stub_s_import_goes_after_the_file_s_imports():
    source = '"""Doc."""\n\nimport os\nfrom pathlib import (\n    Path)\n\n\ndef f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n'
    assert student_edition.clear_solution(source).split("\n")[:7] == ['"""Doc."""', "", "import os",
                                                                     "from pathlib import (", "    Path)", "",
                                                                     blank.IMPORT]  # PEP 8's blank line between


def test_a_plain_marker_is_named_after_its_function():
    source = "class T:\n    def hook(self):\n        ### BEGIN SOLUTION\n        pass\n        ### END SOLUTION\n"
    assert 'raise NotDone("hook")' in student_edition.clear_solution(source)
    cell = student_edition.clear_solution("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "cell 3")
    assert 'raise NotDone("cell 3")' in cell


@pytest.mark.parametrize("source, message", [
    ("### BEGIN SOLUTION\nx = 1", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
    ("x = 1\n### END SOLUTION", "without"),
])
def test_broken_regions_are_named(source, message):
    with pytest.raises(ValueError, match=message):
        student_edition.clear_solution(source, "f.py")


def test_markdown_about_the_reference_solution_goes():
    source = ("Write `f`.\n\nThe next cell is where `f` goes. Here it holds the reference solution,\n"
              "**collapsed**: try first.\n\nIn the student edition it is blank.\n\nThe grader follows.")
    assert student_edition.student_markdown(source) == (
        "Write `f`.\n\nThe next cell is where `f` goes" + student_edition.YOUR_TURN + "\n\nThe grader follows.")


def test_the_tree_holds_every_tracked_file_but_the_excluded(student_tree):
    tracked = student_edition.tracked_files(REPO)
    written = sorted(str(p.relative_to(student_tree)) for p in student_tree.rglob("*") if p.is_file())
    assert written == sorted([*(p for p in tracked if not student_edition.excluded(p)), student_edition.EDITION_MARK])
    for gone in ("experiments/35-ddp-cpu/manifest.json", "experiments/35-ddp-cpu/state-rank-0.pt",
                 "experiments/35-ddp-cpu/timings.jsonl", "experiments/35-ddp-cpu/scaling.png",
                 "experiments/35-ddp-cpu/run.json", "experiments/35-ddp-cpu/run-2proc.ipynb",
                 "experiments/35-ddp-cpu/notebook-times.json"):
        assert not (student_tree / gone).exists(), gone
    assert not any((student_tree / "experiments/35-ddp-cpu" / d).exists() and any((student_tree / "experiments/35-ddp-cpu" / d).iterdir())
                   for d in ("single-process", "repeats"))
    assert not (student_tree / "solutions").exists() and not (student_tree / "TEACHER.md").exists()
    beyond = [p for p in tracked if p.startswith("experiments/35-ddp-cpu/beyond/")]
    assert beyond and all((student_tree / p).read_bytes() == (REPO / p).read_bytes() for p in beyond)


def test_every_solution_region_becomes_its_stub(student_tree):
    with_regions = [p for p in student_edition.tracked_files(REPO) if p.endswith((".py", ".ipynb"))
                    and not student_edition.excluded(p) and p != "src/minitrain/lab/editions/student_edition.py"
                    and any(map(student_edition.BEGIN_LINE.match, "\n".join(_sources(REPO / p)).splitlines()))]
    assert set(SHEET_REGIONS) | {f"notebooks/{n}" for n in EXERCISES} <= set(with_regions)
    for rel in with_regions:
        sources = _sources(student_tree / rel)
        text = "\n".join(sources)
        assert not any(student_edition.BEGIN_LINE.match(line) or student_edition.END_LINE.match(line)
                       for line in text.splitlines()), rel
        reference = region_lines("\n".join(_sources(REPO / rel)))
        leftovers = {line for line in reference if line not in ("pass", "return")} & {
            line.strip() for line in text.splitlines()}
        assert not leftovers, f"{rel}: solution lines left in the student edition: {leftovers}"
        assert "# YOUR CODE HERE (" in text and 'raise NotDone("' in text and blank.IMPORT in text, rel
        if rel.endswith(".py"):
            compile(text, rel, "exec")
    for rel, what in SHEET_REGIONS.items():
        assert blank.stub(what) in (student_tree / rel).read_text()


def _sources(path) -> list[str]:
    if path.suffix == ".ipynb":
        return [c.source for c in nbformat.read(path, as_version=4).cells]
    return [path.read_text()]


def test_the_notebooks_are_cleared_and_say_nothing_of_the_reference(student_tree):
    for path in sorted((student_tree / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            assert "execution" not in cell.metadata
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
            else:
                assert not student_edition.REFERENCE_TEXT.search(cell.source), f"{path.name}: {cell.source[:200]}"
    for name, (solution_id, graded_id) in EXERCISES.items():
        reference = nbgrader_cells(nbformat.read(NOTEBOOKS_DIR / name, as_version=4))
        cells = nbgrader_cells(nbformat.read(student_tree / "notebooks" / name, as_version=4))
        assert "jupyter" not in cells[solution_id].metadata  # the stub is shown, not collapsed
        assert cells[solution_id].metadata["nbgrader"] == reference[solution_id].metadata["nbgrader"]
        assert cells[graded_id].source == reference[graded_id].source


def test_a_blank_stub_fails_loudly_with_what_is_missing(student_tree, corpus_dir):
    code = ("import sys\nfrom minitrain.data import make_shard\n"
            "try:\n    make_shard(0, 2, sys.argv[1])\nexcept NotImplementedError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(corpus_dir)], capture_output=True, text=True, timeout=120,
                          cwd=student_tree, env={"PYTHONPATH": str(student_tree / "src"), "PATH": ""})
    assert proc.stdout == "not done yet: Block B: make_shard's split\n", proc.stderr


def test_the_student_edition_s_tests_skip_a_blank_todo_and_name_it(student_tree, tmp_path):
    """pytest in the student tree, as its make test runs it: a test and a notebook that reach Block B's blank stub
    are skipped, one line naming it, the notebook's later cells with it; a test that needs no TODO still runs."""
    tree = shutil.copytree(student_tree, tmp_path / "student")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
                           "--color=no", "tests/minitrain/test_data.py", "notebooks/02-sharding.ipynb"],
                          capture_output=True, text=True, timeout=300, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree / "src")})
    assert proc.returncode == 0, proc.stdout[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " skipped" in summary and "failed" not in summary, summary
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert {line.split(": ", 1)[1] for line in skips} == {
        "TODO not done yet: Block B: make_shard's split (write it; `make grade` gives its points)"}, skips
    assert any(line.startswith("SKIPPED [1] tests/minitrain/test_data.py:") for line in skips), skips
    cells = [line for line in skips if "02-sharding.ipynb" in line]  # the first blank cell and every one after it, one line
    assert len(cells) == 1 and int(cells[0].split("[")[1].split("]")[0]) > 1, cells
    left = proc.stdout.split("TODOs not done yet: `make grade` gives each its points")[1].splitlines()[1:]
    assert [line for line in left[:left.index(next(line for line in left if line.startswith("=")))] if line] == \
        ["Block B: make_shard's split"], left


@pytest.mark.parametrize("out, message", [
    ("src/build", "is inside the tracked folder src/"),
    ("notebooks", "is inside the tracked folder notebooks/"),
    (".", "holds the repository itself"),
    ("..", "holds the repository itself"),
])
def test_out_inside_the_repository_is_refused_in_one_line(out, message, monkeypatch, capsys):
    """In-process main(argv); the test below runs the command itself once."""
    monkeypatch.chdir(REPO)
    assert student_edition.main(["--out", out]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.count("\n") == 1
    assert message in printed.err and printed.err.startswith("error: --out")


def test_the_command_refuses_an_out_inside_the_repository_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "minitrain.lab.student", "--out", "src/build"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: --out src/build is inside the tracked folder src/")


def test_a_folder_of_other_files_is_not_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="holds other files"):
        student_edition.write_student_edition(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_excluded_patterns_name_files_that_exist():
    tracked = student_edition.tracked_files(REPO)
    unmatched = [p for p in student_edition.EXCLUDED if not any(fnmatch.fnmatch(t, p) for t in tracked)]
    assert unmatched == []


def test_the_key_quotes_the_reference_as_it_is():
    text = refresh.KEY.read_text()
    assert len(refresh.QUOTE.findall(text)) >= 12
    assert refresh.refreshed(text) == text, "stale quotes: run `python -m minitrain.lab.teacher`"


TEACHER_MODULES = ("src/minitrain/lab/teaching/refresh.py", "src/minitrain/lab/teaching/rubric.py",
                   "src/minitrain/lab/teaching/reference.py", "src/minitrain/lab/teaching/diagnosis_key.py",
                   "src/minitrain/lab/teacher.py")  # and the teacher's shim


def _reference_sentences() -> list[str]:
    """Block G's answer as the reference writes it for the committed run: its sentences, and one of
    its template's literal phrases (the generator under any name would carry it)."""
    from minitrain.lab.reporting.manifest import Manifest
    from minitrain.lab.teaching.reference import reference_paragraph

    paragraph = reference_paragraph(Manifest.read(REPO / "experiments/35-ddp-cpu/manifest.json"))
    return [s for s in paragraph.split(". ") if len(s) > 40] + ["win while a rank's step stays under twice"]


def test_the_tree_holds_no_teacher_module_and_nothing_that_writes_block_g(student_tree):
    """No key, rubric or reference paragraph to run: no module, no function, no text of the answer."""
    for rel in TEACHER_MODULES:
        assert (REPO / rel).is_file() and not (student_tree / rel).exists(), rel
    answers = _reference_sentences()
    for path in sorted(p for p in student_tree.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".json")):
        text = path.read_text(errors="replace")
        rel = str(path.relative_to(student_tree))
        assert not [a for a in answers if a in text], f"{rel} holds Block G's reference paragraph"
        if path.suffix == ".py":
            defined = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert not defined & {"reference_paragraph", "rubric_text", "refreshed"}, rel
    proc = subprocess.run([sys.executable, "-c", "import minitrain.lab.teaching.rubric"], capture_output=True, text=True,
                          timeout=60, cwd=student_tree, env={"PYTHONPATH": str(student_tree / "src"), "PATH": ""})
    assert "No module named 'minitrain.lab.teaching.rubric'" in proc.stderr


def test_the_tree_holds_no_module_of_the_teachers_kit_whatever_its_name(student_tree):
    """Every module of the reference's teaching/ (the teacher's kit, as it is named today) is in TEACHER_MODULES, and
    the student tree's teaching/ holds only its __init__.py."""
    kit = {f"src/minitrain/lab/teaching/{p.name}" for p in (REPO / "src/minitrain/lab/teaching").glob("*.py")
           if p.name != "__init__.py"}
    assert kit <= set(TEACHER_MODULES), f"not in TEACHER_MODULES: {sorted(kit - set(TEACHER_MODULES))}"
    assert [p.name for p in (student_tree / "src/minitrain/lab/teaching").glob("*.py")] == ["__init__.py"]


BUILD_IN_THE_TREE = """import json, sys
from dataclasses import asdict
from pathlib import Path
from minitrain.lab.reporting.report import build_manifest
print(json.dumps(asdict(build_manifest(Path(sys.argv[1]), "the student tree's report builder"))))
"""


def test_a_manifest_built_in_the_tree_holds_only_the_learners_paragraph(student_tree, tmp_path):
    """The student tree's report builder on a run (the committed one, copied): its manifest has no
    reference paragraph, and lesson_notes stays empty until the learner writes it."""
    run = tmp_path / "run"
    shutil.copytree(REPO / "experiments/35-ddp-cpu", run, ignore=shutil.ignore_patterns("manifest.json", "beyond"))
    proc = subprocess.run([sys.executable, "-c", BUILD_IN_THE_TREE, str(run)], capture_output=True, text=True,
                          timeout=120, cwd=student_tree, env={"PYTHONPATH": str(student_tree / "src"), "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)
    assert "lesson_notes_reference" not in manifest and manifest["lesson_notes"] == ""
    assert manifest["run_ids"] == json.loads((REPO / "experiments/35-ddp-cpu/manifest.json").read_text())["run_ids"]
    assert not [a for a in _reference_sentences() if a in proc.stdout]


def test_teacher_md_s_times_are_written_from_notebook_times():
    """Each row of TEACHER.md's time table gets its notebook's path and seconds from notebook-times.json,
    and the line under it names the lab run; a table without a notebook's row is named."""
    from minitrain.lab.running.notebook_times import lab_run, numbered_notebooks, path_of

    names = numbered_notebooks()
    times = {"notebooks": {n: 10.2 + i for i, n in enumerate(names)}, **lab_run("python -m minitrain.lab --all-notebooks", 2)}
    text = refresh.guide_with_times(refresh.GUIDE.read_text(), times)
    rows = [m[0].split(" | ") for m in refresh.TIME_ROW.finditer(text)]
    assert [(row[1], row[2].rstrip(" |")) for row in rows] == [(path_of(n), f"{10.2 + i:.0f}") for i, n in enumerate(names)]
    assert ("Times from `experiments/35-ddp-cpu/notebook-times.json`: lab run `python -m minitrain.lab --all-notebooks`, "
            f"started {times['started']}, sitting {times['sitting']}") in " ".join(text.split())
    assert refresh.guide_with_times(text, times) == text
    without_15 = "\n".join(line for line in text.splitlines() if not line.startswith("| 15 "))
    last = names[-1][:2]
    with pytest.raises(ValueError, match=f"rows 01, 02.*, 14, 16, .*{last} for notebooks 01, .*, 15, 16, .*{last}"):
        refresh.guide_with_times(without_15, times)


def test_teacher_md_s_times_are_the_committed_lab_run_s():
    """After the lab run that makes the committed notebooks, `python -m minitrain.lab.teacher` writes them."""
    from minitrain.lab.running.notebook_times import read_times

    text = refresh.GUIDE.read_text()
    assert refresh.guide_with_times(text, read_times(refresh.TIMES.parent)) == text, \
        "TEACHER.md's times are stale: run `python -m minitrain.lab.teacher`"


def test_readme_s_time_is_the_sum_of_the_core_path_in_notebook_times():
    """README's "How long it takes" holds the sum of notebooks 01-06's seconds in the committed notebook-times.json
    and how many ran at once, written by `python -m minitrain.lab.teacher`; a core notebook without a time is named."""
    from minitrain.lab.running.notebook_times import lab_run, numbered_notebooks, read_times

    text = refresh.README.read_text()
    committed = read_times(refresh.TIMES.parent)
    assert refresh.readme_with_times(text, committed) == text, "README's time is stale: run `python -m minitrain.lab.teacher`"
    core = numbered_notebooks(every=False)
    times = {"notebooks": {n: 10.0 + i for i, n in enumerate(numbered_notebooks())}, **lab_run("python -m minitrain.lab", 1)}
    sentence = refresh.MACHINE_PART.search(refresh.readme_with_times(text, times))[0]
    assert f"added up to {sum(10.0 + i for i in range(len(core))):.0f} s" in sentence and "(one at a time;" in sentence
    assert "load average" not in text
    del times["notebooks"][core[2]]
    with pytest.raises(ValueError, match="lacks a time of notebooks 01-06"):
        refresh.readme_with_times(text, times)


def test_teacher_check_names_stale_or_missing_times(tmp_path, monkeypatch, capsys):
    from minitrain.lab.running.notebook_times import TIMES_FILE, lab_run, numbered_notebooks, write_times

    monkeypatch.setattr(refresh, "TIMES", tmp_path / TIMES_FILE)
    assert refresh.main(["--check"]) == 1
    assert f"TEACHER.md: no {TIMES_FILE} in " in capsys.readouterr().out
    write_times(tmp_path, {name: 1000.0 for name in numbered_notebooks()}, lab_run("python -m minitrain.lab", 2))
    assert refresh.main(["--check"]) == 1
    assert "TEACHER.md: its times differ from " in capsys.readouterr().out


def _stub_text(tree, path: str, name: str) -> str:
    """The docstring and comments of the top-level function or class `name` in the tree's `path`, one space apart."""
    source = (tree / path).read_text()
    node = next(n for n in ast.parse(source).body if getattr(n, "name", None) == name)
    lines = source.splitlines()[node.lineno - 1:node.end_lineno]
    return " ".join(" ".join(lines).replace("#", " ").split())


def _record_keys() -> list[str]:
    from minitrain.script import STEP_KEYS
    return list(STEP_KEYS)


def _shard_keys() -> list[str]:
    from dataclasses import fields

    from minitrain.run_record import RunRecord
    keys = ["shard_sentences", "first_sentences"]  # write_run_files puts check_shards' return into run.json
    assert set(keys) <= {f.name for f in fields(RunRecord)}
    return keys


CONTRACTS = [  # (file, function or class, what its grader or the lab's code after it relies on, as the stub must say it)
    ("src/minitrain/ddp.py", "init_distributed", ["prepare_rank's `options`", "(rank, world_size), two ints",
                                                  "joins nothing new", "not LOCAL_RANK", "env://"]),
    ("src/minitrain/ddp.py", "wrap_for_ddp", ["PyTorch's defaults", "no device_ids", "static_graph", "in MiB",
                                              "Without a process group raise RuntimeError", "naming init_distributed()",
                                              "broadcast_buffers", "pass the None on"]),
    ("src/minitrain/ddp.py", "is_main_process", ["True on rank 0 only", "True in a plain single process"]),
    ("src/minitrain/ddp.py", "barrier", ["every rank", "a no-op without a process group"]),
    ("src/minitrain/ddp.py", "cleanup", ["wait for every rank first", "destroy the group", "safe to call twice"]),
    ("src/minitrain/data.py", "make_shard", ["index % world_size == rank", "in corpus order",
                                                  "no process group", "no DistributedSampler",
                                                  "`mine`"]),
    ("src/minitrain/data.py", "check_shards", ["RuntimeError, on every rank", "not an assert", "`[rank R] pid PID`", *map('"{}"'.format, _shard_keys()),
                                             "passes two identical shards"]),
    ("experiments/35-ddp-cpu/train.py", "setup", ["args.seed + rank", "35000 + rank", "seed=", "with `wrap`", "args.lr",
                                                  "the lab checks that setup called it", "seeding before building",
                                                  "keywords n_layer, n_head and n_embd",
                                                  "(rank, world_size, the wrapped model, this rank's shard, the optimizer)"]),
    ("experiments/35-ddp-cpu/train.py", "train_step", ["timed_backward(loss, timers)", "controls.maybe_no_sync(model, no_sync)",
                                                       "from before next(shard) to after zero_grad", "milliseconds",
                                                       "exactly these five keys", "finite float", *map('"{}"'.format, _record_keys())]),
    ("src/minitrain/timing.py", "BarrierTimer", ["milliseconds", "Without a process group", "wall clock",
                                                 "not the all-reduce alone"]),
    ("experiments/35-ddp-cpu/compare_states.py", "states_equivalent", ["(True, 0.0)", "same shapes", "as sets",
                                                                       "the `atol` given", "whatever the verdict",
                                                                       "never asserted"]),
]


@pytest.mark.parametrize("path, name, said", CONTRACTS, ids=[f"{p.split('/')[-1]}:{n}" for p, n, _ in CONTRACTS])
def test_each_stub_states_what_its_grader_checks(student_tree, path, name, said):
    """What a grader (or the lab's code after the learner's region) fails a learner for is in the blank stub itself."""
    text = _stub_text(student_tree, path, name)
    assert "raise NotDone(" in text  # the blank stub, not the reference
    assert not [s for s in said if s not in text], f"{path}:{name}'s stub does not say: {[s for s in said if s not in text]}"


FIRST_BLANK = {  # notebook -> the first blank TODO its Run All meets in a blank tree
    "02-sharding": "Block B: make_shard's split", "03-wrapping": "Block A: init_distributed",
    "04-launch-and-timing": "Block C: setup",
    "05-verification": "Block B: make_shard's split", "06-scaling-and-report": "Block B: make_shard's split"}
STARTS_A_PROCESS = ("run_streaming", "torchrun", "grade_", "ensure_runs", "run_training", "spawn")


def test_a_blank_tree_s_run_all_stops_at_the_first_blank_todo_in_one_line(student_tree, tmp_path, monkeypatch):
    """Each core notebook of a blank tree, executed top to bottom as Run All does: it stops at its first blank TODO
    with one line naming it and its file, before any cell that starts a process."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    monkeypatch.setenv("PYTHONPATH", str(student_tree / "src"))  # the kernels import the tree's minitrain
    monkeypatch.setenv("MINITRAIN_LAB_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("MINITRAIN_LAB_SCRATCH", str(tmp_path / "scratch"))
    for name, todo in FIRST_BLANK.items():
        nb = nbformat.read(student_tree / "notebooks" / f"{name}.ipynb", as_version=4)
        with pytest.raises(CellExecutionError):
            NotebookClient(nb, timeout=240, kernel_name="python3",
                           resources={"metadata": {"path": str(student_tree / "notebooks")}}).execute()
        stop, error = next((i, o) for i, cell in enumerate(nb.cells) for o in cell.get("outputs", [])
                           if o.output_type == "error")
        assert error.traceback == [f"TodoNotDone: {error.evalue}"], (name, error.traceback)
        assert error.evalue.startswith(f"{todo} is blank: write it in ") and "run this cell again" in error.evalue
        started = [i for i, cell in enumerate(nb.cells[:stop]) if cell.cell_type == "code"
                   and any(call in cell.source for call in STARTS_A_PROCESS)]
        assert not started, f"{name}: cells {started} start a process before the stop at cell {stop}"


# ------------------------------------------------------------------------------------------------
# No answer elsewhere: a solution region's logic does not stand anywhere else in the student tree.
# How: each region, and each function (or notebook cell) of the student tree, is reduced to the names of the
# calls it makes, in the order Python makes them (`(x.double() - y.double()).abs().max()`: double, double, abs,
# max). A unit holds a region's logic when it makes the region's calls in the same order: the longest common
# subsequence of the two, each call weighted by how rare it is in the tree (log of units over units using it:
# `wrap` and `timed_backward` count, `item` and `perf_counter` barely), over the region's weight. Regions of
# fewer than 4 calls are the API itself (`if dist.is_initialized(): dist.barrier()`) and are not looked for.
# Renaming variables does not hide a copy; rewriting it in other calls does (the fresh reader's search covers that).
SAME_LOGIC = 0.7
NOT_ANSWERS = {  # a unit the detector flags -> why it is not the answer (each seen flagged; a stale entry fails)
    ("notebooks/02-sharding.ipynb", "cell 13"): "02 teaches the calls on a group of one (HashStore) before Block A",
    ("src/minitrain/verify.py", "compare_states"): "the checker's judge: it raises on other keys, torch.testing gives "
                                                   "the verdict and the bytes the bitwise one (not ex03's keys and torch.equal)",
}


def _calls(node: ast.AST) -> list[str]:
    calls: list[str] = []

    class Calls(ast.NodeVisitor):
        def visit_Call(self, call: ast.Call) -> None:
            self.generic_visit(call)  # the function's own calls and the arguments' first, as Python runs them
            calls.append(call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "?"))
    Calls().visit(node)
    return calls


def _parsed(source: str) -> ast.Module | None:
    lines = [line for line in textwrap.dedent(source).split("\n") if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:  # a cell of shell or markdown-like text
        return None


def _solution_regions() -> dict[str, list[str]]:
    """'FILE: what' -> the calls of that reference solution region."""
    found: dict[str, str] = {}
    for rel in student_edition.tracked_files(REPO):
        if rel.endswith((".py", ".ipynb")) and rel != "src/minitrain/lab/editions/student_edition.py":
            for n, source in enumerate(_sources(REPO / rel)):
                what = None
                for line in source.split("\n"):
                    if begin := student_edition.BEGIN_LINE.match(line):
                        what = f"{rel}: {begin['what'] or f'cell {n}'}"
                        found[what] = ""
                    elif student_edition.END_LINE.match(line):
                        what = None
                    elif what:
                        found[what] += line + "\n"
    return {what: _calls(tree) for what, code in found.items() if (tree := _parsed(code))}


def _units(tree: Path) -> list[tuple[str, str, list[str]]]:
    """(file, function or 'cell N', its calls) for every function and notebook code cell of the tree."""
    units = []
    for path in sorted(p for p in tree.rglob("*") if p.suffix in (".py", ".ipynb") and ".venv" not in p.parts):
        sources = ([c.source if c.cell_type == "code" else "" for c in nbformat.read(path, as_version=4).cells]
                   if path.suffix == ".ipynb" else [path.read_text()])
        for n, source in enumerate(sources):
            if (parsed := _parsed(source)) is None:
                continue
            rel = str(path.relative_to(tree))
            units += [(rel, f"cell {n}", _calls(parsed))] if path.suffix == ".ipynb" else []
            units += [(rel, f.name, _calls(f)) for f in ast.walk(parsed)
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return units


def _weighted_lcs(region: list[str], unit: list[str], weight: dict[str, float]) -> float:
    previous = [0.0] * (len(unit) + 1)
    for call in region:
        current = [0.0]
        for j, other in enumerate(unit):
            current.append(previous[j] + weight[call] if call == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def answers_in(tree: Path) -> dict[tuple[str, str], str]:
    """(file, unit) -> the region whose logic it holds, over the whole tree."""
    units, regions = _units(tree), _solution_regions()
    used = Counter(call for _, _, calls in units for call in set(calls))
    weight = defaultdict(lambda: math.log(len(units)), {c: math.log(len(units) / (1 + n)) for c, n in used.items()})
    found = {}
    for rel, name, calls in units:
        for what, region in regions.items():
            if len(region) >= 4 and _weighted_lcs(region, calls, weight) >= SAME_LOGIC * sum(map(weight.__getitem__, region)):
                found[(rel, name)] = what
    return found


def test_no_solution_region_s_logic_stands_elsewhere_in_the_student_tree(student_tree):
    found = answers_in(student_tree)
    assert {unit: what for unit, what in found.items() if unit not in NOT_ANSWERS} == {}
    assert set(NOT_ANSWERS) <= set(found), f"not flagged any more, drop from NOT_ANSWERS: {set(NOT_ANSWERS) - set(found)}"


def test_the_detector_finds_an_answer_written_out_elsewhere(student_tree, tmp_path):
    """Block C's setup written out with other names in a helper of the tree (as minitrain.rank once did): flagged."""
    tree = Path(shutil.copytree(student_tree, tmp_path / "tree"))
    (tree / "src/minitrain/helper.py").write_text(textwrap.dedent('''
        def build(r, args, corpus):
            r2, n = init_distributed("gloo")
            seed_everything(args.seed + r2)
            net, _ = build_model_for_corpus(corpus, args.block_size)
            data = make_shard(r2, n, corpus, seed=args.seed + r2)
            net = wrap_for_ddp(net)
            return net, data, torch.optim.AdamW(net.parameters(), lr=args.lr)
        '''))
    assert answers_in(tree)[("src/minitrain/helper.py", "build")].endswith("Block C: setup")


def _normalised(text: str) -> str:
    """Each non-blank line stripped, joined: a block of code found whatever its indentation."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _answers(todo: registry.Todo) -> list[str]:
    """The reference's answer to `todo` as text: each solution region of its file (its notebook's), or each run of
    lines its fix adds to the broken script, normalised."""
    if todo.file.endswith("/"):  # F: the learner's run
        return []
    if todo.starts_as:
        broken = (REPO / todo.starts_as).read_text().splitlines()
        fixed = (REPO / todo.file).read_text().splitlines()
        added = difflib.SequenceMatcher(None, broken, fixed, autojunk=False).get_opcodes()
        return [_normalised("\n".join(fixed[j1:j2])) for tag, _, _, j1, j2 in added if tag in ("replace", "insert")]
    blocks, inside = [], None
    for line in "\n".join(_sources(REPO / todo.file)).splitlines():
        if student_edition.BEGIN_LINE.match(line):
            inside = []
        elif student_edition.END_LINE.match(line):
            blocks.append(_normalised("\n".join(inside)))
            inside = None
        elif inside is not None:
            inside.append(line)
    return [b for b in blocks if b]


@pytest.mark.parametrize("key", [t.key for t in registry.TODOS])
def test_no_file_of_the_student_tree_holds_an_exercise_s_answer(student_tree, key):
    """Every exercise, graded by code or by data: no solution region's code in any file (tests and graders too), no
    run of the reference's (F, G), no planted place of notebook 16's scripts (the key is data: its module and test
    are left out, and test_the_student_tree_s_diagnosis_grader_cannot_tell_right_from_wrong runs the grader there)."""
    from minitrain.lab.teaching.diagnosis_key import PLANTED

    todo = registry.BY_KEY[key]
    answers = _answers(todo)
    assert answers or todo.file.endswith("/"), f"{key}: no solution region in {todo.file}"
    texts = {str(p.relative_to(student_tree)): _normalised("\n".join(_sources(p)) if p.suffix == ".ipynb" else
                                                           p.read_text(errors="replace"))
             for p in student_tree.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".json", ".txt",
                                                                              ".toml", ".cfg", ".yaml", ".yml", "")}
    assert not [(rel, a[:60]) for rel, text in texts.items() for a in answers if a in text]
    if key in ("F", "G"):  # the learner's run: the reference's is not there to copy
        assert not [n for n in registry.RUN_FILES if (student_tree / registry.EXPERIMENT / n).exists()]
    if key.startswith("ex16"):
        script = f"run_{key[-1]}.py"
        places = [f"{script}:{n}" for n in PLANTED[script].lines(script)]
        assert not [(rel, place) for rel, text in texts.items() for place in places if place in text], places
        assert not (student_tree / "src/minitrain/lab/teaching/diagnosis_key.py").exists()


RIGHT_OR_WRONG = """import json, sys
from minitrain.lab.grading.graders.diagnosis import grade_diagnosis
answers = json.loads(sys.argv[1])
print(json.dumps([grade_diagnosis(lambda script: answer) for answer in answers]))
"""


def test_the_student_tree_s_diagnosis_grader_cannot_tell_right_from_wrong(student_tree):
    """With the answer key nowhere in the tree (as code, data or a hash of it), its grader gives the right answer and
    every wrong one the same verdict: "graded by your teacher"; no run starts (the key names the tool to run)."""
    from minitrain.lab.teaching.diagnosis_key import PLANTED

    answers = []
    for script, p in PLANTED.items():
        right = {"rank": p.rank, "step": p.step, "line": f"{script}:{min(p.lines(script))}", "collective": p.collective,
                 "cause": p.cause}
        answers += [right, {**right, "rank": 1 - (p.rank or 0)}, {**right, "step": p.step + 1},
                    {**right, "line": f"{script}:1"}, {**right, "cause": "barrier-on-one-rank"}]
    proc = subprocess.run([sys.executable, "-c", RIGHT_OR_WRONG, json.dumps(answers)], capture_output=True, text=True,
                          timeout=120, cwd=student_tree, env={"PYTHONPATH": str(student_tree / "src"), "PATH": ""})
    verdicts = set(json.loads(proc.stdout or "null") or [proc.stderr])
    assert len(verdicts) == 1 and verdicts.pop().startswith("graded by your teacher"), verdicts


def _rows(tree: Path, keys: tuple[str, ...]) -> list[str]:
    """`make grade`'s rows of `keys` in `tree`, without their times: the tree's own command."""
    proc = subprocess.run([sys.executable, "-m", "minitrain.lab.grade", *(a for k in keys for a in ("--only", k))],
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree / "src")}, capture_output=True, text=True,
                          timeout=600)
    return [line.rsplit(" (", 1)[0] for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in keys]


def test_the_stubs_message_is_not_what_grading_reads(student_tree, tmp_path):
    """A student tree whose NotDone says something else grades every blank row as before, status and detail: its own
    `make grade` beside the tree as it is, graded here (the same rows' code)."""
    from minitrain.lab.grading import gradebook
    keys = ("B1", "B2", "D", "E", "F", "ex03", "ex16a")
    as_is, reworded = (Path(shutil.copytree(student_tree, tmp_path / name, symlinks=True))
                       for name in ("as-is", "reworded"))
    todo = reworded / "src/minitrain/todo.py"
    todo.write_text(todo.read_text().replace('f"not done yet: {what}"', 'f"TODO left ({what}), write it"'))
    assert "not done yet" not in todo.read_text()
    before = [gradebook.format_row(g).rsplit(" (", 1)[0] for g in gradebook.grade_repo(as_is, list(keys))]
    after = _rows(reworded, keys)
    assert len(before) == len(keys) and all(" not done  " in row and ": not done yet: " in row for row in before), before
    assert after == before
