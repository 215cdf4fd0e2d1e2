"""The grade command on real student trees, every TODO in a process of its own: the blank tree is "not
done" everywhere (C "blocked" by the TODOs it needs), the reference put back passes (notebook 16's exercise "graded
by your teacher": its key is not in the tree), a mistake is named, a hang is graded "hangs", leaves no process and
blocks the TODO that needs it, the sheet's points are summed apart from the exercises', and a class folder gets its
table and grades.csv: notebook 16's exercise graded with the teacher's key, a TODO whose needs failed with the
reference's files of them."""

import ast
import csv
import json
import os
import re
import shutil
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

import learner
from minitrain.lab.grading import gradebook
from minitrain.lab.todos import registry

BLANK_TIMEOUT_S = 240  # per TODO: generous for a loaded machine; a blank ends in seconds


def processes_of(tree) -> list[str]:
    """Processes started for `tree` (in it: a grader's child starts there, its ranks and runs with it) still alive 5 s
    after the grade ended (a killed process may take a moment to be reaped)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(Path(tree).resolve()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    left = []
    for proc in psutil.wait_procs(found, timeout=5)[1]:
        try:
            left.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")  # what it is, for the failure's message
        except psutil.Error:
            pass  # gone since
    return left


def test_a_blank_tree_is_not_done_everywhere_and_not_started_and_ex15_is_graded_on_its_own(student_tree, tmp_path):
    """Every row "not done" but C, which needs A, B and D: "blocked" by them, never run; each part "not started". In
    the same grading, a copy with only scratch_ddp.py's solutions put back (make_shard, Block B, still blank): ex15
    passes, its other rows as blank."""
    tree = learner.copy_tree(student_tree, tmp_path / "blank")
    scratch_only = learner.copy_tree(student_tree, tmp_path / "scratch-only")
    learner.put_back_the_reference(scratch_only, ["src/minitrain/scratch_ddp.py"])
    with ThreadPoolExecutor(2) as pool:
        grading = pool.submit(gradebook.grade_repo, tree, None, BLANK_TIMEOUT_S, None, 2)
        [ex15] = gradebook.grade_repo(scratch_only, ["ex15"])
        grades = grading.result()
    assert ex15.status == "PASS", ex15
    assert [g.todo.key for g in grades] == [t.key for t in registry.TODOS]
    rows = {g.todo.key: (g.status, g.detail) for g in grades}
    assert rows.pop("C") == ("blocked", "needs A, B1, B2 and D (not done yet)")
    assert all(status == "not done" and "not done yet" in detail for status, detail in rows.values()), rows
    assert rows["ex15"][1].startswith("not done yet: NaiveDDP"), rows["ex15"]  # its own stubs, not Block B's
    assert gradebook.summary(grades) == ("the sheet not started 0/15, exercises beyond it not started 0/3, "
                                         "optional (notebooks 15 to 19) not started 0/18")
    assert processes_of(tree) == [] and processes_of(scratch_only) == []


def solved_tree(student_tree, out):
    """A learner's tree with every solution pasted and the committed run as theirs: full marks."""
    tree = learner.copy_tree(student_tree, out)
    learner.put_back_the_reference(tree, registry.TODO_FILES)
    learner.put_back_the_committed_run(tree)
    return tree


def test_the_reference_put_back_passes_and_each_part_is_summed_apart(student_tree, tmp_path):
    """Every row passes but notebook 16's: the key is not in the student tree, the teacher grades it (no point lost)."""
    grades = gradebook.grade_repo(solved_tree(student_tree, tmp_path / "reference"), jobs=2)
    failed = {g.todo.key: (g.status, g.detail) for g in grades if g.status != "PASS"}
    assert failed == {k: ("teacher", "graded by your teacher, in class grading: the answer key is not in this tree; "
                                     "its form is right (5 keys, each of its kind)")
                      for k in ("ex16a", "ex16b", "ex16c")}
    assert gradebook.summary(grades) == ("the sheet 15/15, exercises beyond it 3/3, optional (notebooks 15 to 19) "
                                         "15/15, ex16a, ex16b and ex16c graded by your teacher")
    assert " -/1  teacher " in gradebook.format_row(next(g for g in grades if g.todo.key == "ex16c"))


def with_function(path, name: str, code: str) -> None:
    """`path` with its top-level function `name` replaced by `code` (the learner's version)."""
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines()
    path.write_text("\n".join(lines[:node.lineno - 1] + code.strip("\n").splitlines() + lines[node.end_lineno:]) + "\n")


def wrong_max_abs_diff(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "max_abs_diff": 1e-3}))


def a_state_nudged(folder):
    import torch
    state = torch.load(folder / "state-rank-1.pt", weights_only=True)
    next(iter(state.values())).view(-1)[0] += 1e-2
    torch.save(state, folder / "state-rank-1.pt")


def with_notes(change):
    def write(folder):
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps({**manifest, "lesson_notes": change(manifest)}))
    return write


@pytest.mark.parametrize("key, change, message", [
    ("F", lambda folder: (folder / "scaling.png").unlink(), "files: missing: scaling.png"),
    ("F", wrong_max_abs_diff, "equivalence: manifest max_abs_diff is 0.001, the state files say 0"),
    ("F", a_state_nudged, "equivalence: the ranks' states differ: max |diff| 1.000e-02"),
    ("F", lambda folder: (folder / "timings.jsonl").write_text((folder / "timings.jsonl").read_text()[:-200]),
     "allreduce timing: timings.jsonl line"),
    ("G", with_notes(lambda m: re.sub(r"\d\.\d\dx", "9.99x", m["lesson_notes"], count=1)), "lesson notes:"),
    ("G", with_notes(lambda m: m["lesson_notes"] + " Padding." * 60), "words"),
    ("G", with_notes(lambda m: ""), "lesson notes: lesson_notes is '', not a paragraph"),
], ids=["run: a file missing", "run: the manifest disagrees with the states", "run: the states differ",
        "run: timings cut short", "paragraph: a wrong number", "paragraph: too long", "paragraph: none"])
def test_the_learners_run_is_graded_by_the_stop_conditions(student_tree, tmp_path, key, change, message):
    """grade_todo in-process: the child process runs the same function on the learner's folder."""
    tree = learner.copy_tree(student_tree, tmp_path / "tree")
    assert gradebook.grade_todo(tree, key)[0] == "not done"  # no run yet
    learner.put_back_the_committed_run(tree)
    change(tree / "experiments/35-ddp-cpu")
    status, detail = gradebook.grade_todo(tree, key)
    assert status == "FAIL" and message in detail, detail


@pytest.mark.parametrize("key, rel, what, code, message", [
    ("E", "experiments/35-ddp-cpu/compare_states.py", "Block E: states_equivalent",
     "common = a.keys() & b.keys()\nreturn all(torch.allclose(a[k], b[k], atol=atol) for k in common), "
     "max((a[k] - b[k]).abs().max().item() for k in common)",
     "wrong keys: a copy with an extra tensor came out equivalent"),
    ("E", "experiments/35-ddp-cpu/compare_states.py", "Block E: states_equivalent",
     "ok = all(torch.allclose(a[k], b[k]) for k in a) if a.keys() == b.keys() else False\n"
     "return ok, max((a[k] - b[k]).abs().max().item() for k in a) if ok else float('inf')",
     "allclose without a tolerance"),
    ("E", "experiments/35-ddp-cpu/compare_states.py", "Block E: states_equivalent",
     "if len(a) != len(b):\n    return False, float('inf')\ncommon = a.keys() & b.keys()\n"
     "return all(torch.allclose(a[k], b[k], atol=atol) for k in common), "
     "max(((a[k] - b[k]).abs().max().item() for k in common), default=0.0)",
     "only the common keys compared"),
    ("ex03", "notebooks/03-wrapping.ipynb", "rank1_holds_rank0_init",
     "return all(torch.allclose(before_rank0[k], after_rank1[k]) for k in before_rank0)",
     "tolerance instead of bit for bit"),
    ("E", "experiments/35-ddp-cpu/compare_states.py", "Block E: states_equivalent", "return True, 0.0",
     "largest difference not measured: on a pair equal within atol but not bit for bit"),
], ids=["E: common keys", "E: no tolerance", "E: module. keys", "ex03: allclose", "E: always equivalent"])
def test_a_mistake_written_in_the_student_tree_is_named(student_tree, tmp_path, key, rel, what, code, message):
    """The learner's code where the stub was, graded by grade_todo in-process (the child's function)."""
    tree = learner.copy_tree(student_tree, tmp_path / "tree")
    learner.write(tree, rel, what, code)
    status, detail = gradebook.grade_todo(tree, key)
    assert status == "FAIL" and detail.startswith(message), detail


HANG = '''
if rank == 1:
    import time
    time.sleep(3600)  # a rank that never reaches the collective
reports = [None] * world_size
dist.all_gather_object(reports, (shard.num_sentences, shard.first_sentence))  # HANGS HERE
'''


def test_a_submission_past_its_timeout_is_graded_hangs_and_leaves_no_process(student_tree, tmp_path):
    """A hanging Block B with only the TODO's own 5 s timeout (the collective timeout longer than that: no rank
    reports; test_a_hang_costs_its_own_points_once has the ranks report where): the TODO's own timeout stops it, and
    5 s after it ended none of its processes is left (processes_of)."""
    tree = learner.copy_tree(student_tree, tmp_path / "tree")
    learner.write(tree, "src/minitrain/data.py", "Block B: the counts check and the first-sentence log", HANG)
    [result] = gradebook.grade_repo(tree, ["B2"], timeout_s=5)
    assert result.status == "hangs" and "no result within 5 s" in result.detail, result
    assert processes_of(tree) == []


CHECK_SHARDS_HANGS = "def check_shards(shard, rank, world_size, corpus_total):\n" + textwrap.indent(HANG, "    ")


def test_a_hang_costs_its_own_points_once(student_tree, tmp_path):
    """A solved tree whose check_shards hangs: B2 "hangs", C (which needs it) "blocked" in one line and never
    run, every other row graded on its own; grading C alone grades what it needs first, and shows it; the waiting
    ranks report the hang's line (hang_report) and no process is left. A collective timeout short enough for a fast
    hang report, long enough for A's and D's real runs."""
    tree = solved_tree(student_tree, tmp_path / "tree")
    with_function(tree / "src/minitrain/data.py", "check_shards", CHECK_SHARDS_HANGS)
    grades = gradebook.grade_repo(tree, ["C", "E", "F", "G"], jobs=2, env={"MINITRAIN_COLLECTIVE_TIMEOUT": "8"})
    rows = {g.todo.key: g for g in grades}
    assert list(rows) == ["A", "B1", "B2", "C", "D", "E", "F", "G"]
    number = next(i for i, text in enumerate((tree / "src/minitrain/data.py").read_text().splitlines(), 1)
                  if "# HANGS HERE" in text)
    hang = re.fullmatch(rf"hangs at data\.py:{number} on rank [02] \(waits in all_gather_object\)", rows["B2"].detail)
    assert rows["B2"].status == "hangs" and hang, rows["B2"]
    assert (rows["C"].status, rows["C"].detail) == ("blocked", f"needs B2 ({rows['B2'].detail})")
    assert rows["C"].seconds == 0  # never run: no train.py launched
    others = {k: (g.status, g.detail) for k, g in rows.items() if k not in ("B2", "C") and g.status != "PASS"}
    assert others == {}
    assert gradebook.summary(grades) == "the sheet 11/15"
    assert processes_of(tree) == []
    gradebook.write_csv(tmp_path / "grades.csv", {"hangs": grades})
    with open(tmp_path / "grades.csv") as f:
        [row] = csv.DictReader(f)
    assert (row["B2 status"], row["C status"], row["C points"], row["sheet"], row["sheet out of"]) == (
        "hangs", "blocked", "0", "11", "15")
    assert "blocked" in gradebook.class_table({"hangs": grades}).splitlines()[1]


WRONG_A = "return TorchDDP(model, bucket_cap_mb=bucket_cap_mb, find_unused_parameters=True)"


def test_a_class_is_graded_into_a_table_and_a_csv(student_tree, tmp_path):
    """Two submissions, each in a fresh student tree with the teacher's key: one learner's notebooks only (ex03 and
    notebook 16's diagnosis right: graded on a real run; no fix: not done), another's tree, every solution pasted
    (notebook 16's fixes collected and run) but Block A wrong
    (find_unused_parameters=True): A fails, and C, which needs it, is graded with the reference's ddp.py and passes;
    its row says so. A mistake costs its own points once."""
    folder = tmp_path / "class"
    (folder / "ana" / "work").mkdir(parents=True)
    for name in ("03-wrapping.ipynb", "16-when-it-breaks.ipynb"):  # the solved notebooks
        shutil.copy(gradebook.REPO / "notebooks" / name, folder / "ana" / "work")
    tree = learner.copy_tree(student_tree, folder / "ben")
    learner.put_back_the_reference(tree, registry.TODO_FILES)
    ddp = tree / "src/minitrain/ddp.py"
    ddp.write_text(ddp.read_text().replace("return TorchDDP(model, bucket_cap_mb=bucket_cap_mb)", WRONG_A))
    assert WRONG_A in ddp.read_text()
    lines: list[str] = []
    grades = gradebook.grade_class(folder, ["ex03", "C", "E", "ex16b", "fix16b"], echo=lines.append, jobs=2)
    statuses = {name: {g.todo.key: g.status for g in row} for name, row in grades.items()}
    assert statuses == {"ana": {"A": "not done", "B1": "not done", "B2": "not done", "C": "not done", "D": "not done",
                                "E": "not done", "ex03": "PASS", "ex16b": "PASS", "fix16b": "not done"},
                        "ben": {"A": "FAIL", "B1": "PASS", "B2": "PASS", "C": "PASS", "D": "PASS", "E": "PASS",
                                "ex03": "PASS", "ex16b": "PASS", "fix16b": "PASS"}}
    rows = {name: {g.todo.key: g for g in row} for name, row in grades.items()}
    assert "find_unused_parameters" in rows["ben"]["A"].detail
    assert rows["ben"]["C"].detail.startswith("graded with the reference's ddp.py in place of yours (A (FAIL: ")
    assert rows["ben"]["ex16b"].detail.startswith("run_b.py: right (a real run under hang_report")
    with open(folder / "grades.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert list(csv_rows[0])[-6:] == ["sheet", "sheet out of", "beyond", "beyond out of", "optional",
                                      "optional out of"]  # each part apart, no total
    assert [(r["submission"], r["A points"], r["C points"], r["sheet"], r["sheet out of"], r["beyond"],
             r["optional"]) for r in csv_rows] == [("ana", "0", "0", "0", "11", "1", "1"),
                                                   ("ben", "0", "3", "8", "11", "1", "2")]
    assert "--- ana" in lines and "--- ben" in lines
    assert sorted(os.listdir(folder)) == ["ana", "ben", "grades.csv"]
    table = gradebook.class_table(grades).splitlines()
    assert table[0].split() == ["submission", "A", "B1", "B2", "C", "D", "E", "ex03", "ex16b", "fix16b", "sheet",
                                "beyond", "optional"]
    assert table[2].split()[:5] == ["ben", "FAIL", "PASS", "PASS", "PASS*"] and table[-1].startswith("*: graded with")
