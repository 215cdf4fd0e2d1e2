"""Notebook 16's exercise grader (ex16a-c): a blank stops before any process, a right answer in another form passes
on a real run, and the wrong answers a learner gives are each named, costing their script's point only. (The
reference passes in notebook 16's grader cell and in test_grade's reference tree, both on real runs.)"""

import time

import nbformat
import pytest

from minitrain.diagnose.faults import KINDS
from minitrain.lab.editions import student

from minitrain.lab.grading.graders.diagnosis import PLANTED, grade_diagnosis, mistakes
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.paths import NOTEBOOKS_DIR

RIGHT = {
    "run_a.py": {"rank": 0, "line": f"run_a.py:{PLANTED['run_a.py'].line('run_a.py')}", "collective": "broadcast",
                 "cause": "skipped-collective"},
    "run_b.py": {"rank": None, "line": f"run_b.py:{PLANTED['run_b.py'].line('run_b.py')}", "collective": "all_reduce",
                 "cause": "mismatched-shapes"},
    "run_c.py": {"rank": 1, "line": f"run_c.py:{PLANTED['run_c.py'].line('run_c.py')}", "collective": "all_reduce",
                 "cause": "straggler"},
}


def test_a_blank_diagnose_stops_before_any_process_starts():
    def blank(script: str) -> dict:
        raise NotImplementedError("not done yet: diagnose")
    start = time.monotonic()
    with pytest.raises(ExerciseError, match="^not done yet: diagnose"):
        grade_diagnosis(blank)
    assert time.monotonic() - start < 1.0


def test_a_right_answer_in_another_form_passes():
    other = {"rank": 0, "line": str(PLANTED["run_a.py"].line("run_a.py")), "collective": "dist.broadcast",
             "cause": "Skipped collective"}
    assert mistakes("run_a.py", other) == []
    assert mistakes("run_b.py", {**RIGHT["run_b.py"], "line": f"src/minitrain/diagnose/exercise/{RIGHT['run_b.py']['line']}",
                                 "collective": "allreduce"}) == []
    assert "right" in grade_diagnosis(lambda script: other, ("run_a.py",))  # a real run, this answer


@pytest.mark.parametrize("script, wrong, named", [
    # the hurried learner: the rank hang_report names waiting, its line, its collective
    ("run_a.py", {"rank": 1, "line": "run_a.py:29", "collective": "all_reduce", "cause": "skipped-backward"},
     ("rank:", "line:", "collective:", "cause:")),
    # the table's example taken literally
    ("run_b.py", {"rank": 0, "line": "run_b.py:12", "collective": "all_reduce", "cause": "mismatched-shapes"},
     ("rank:", "line:")),
    # a GPU tutorial's habit: an NCCL timeout, ranks as strings
    ("run_c.py", {"rank": "1", "line": "run_c.py:32", "collective": "all_reduce", "cause": "NCCL timeout"},
     ("rank is '1'", "cause is 'NCCL timeout'")),
    # the straggler read as the rank that waits most
    ("run_c.py", {**RIGHT["run_c.py"], "rank": 0}, ("rank:",)),
    ("run_a.py", {"rank": 0, "line": "run_a.py"}, ("has no collective, cause",)),
    ("run_b.py", ["rank", None], ("not a dict",)),
])
def test_each_wrong_answer_is_named_field_by_field(script, wrong, named):
    found = mistakes(script, wrong)
    assert len(found) == len(named) and all(n in f for n, f in zip(named, found)), found
    right = RIGHT[script]
    assert not any(str(right["line"]) in f for f in found)  # the grader never gives the answer away


def test_a_wrong_answer_costs_its_own_script_only():
    answers = {**RIGHT, "run_a.py": {**RIGHT["run_a.py"], "rank": 1}}
    with pytest.raises(ExerciseError, match=r"^run_a\.py: rank:"):
        grade_diagnosis(answers.__getitem__, ("run_a.py",))
    assert mistakes("run_b.py", answers["run_b.py"]) == [] and mistakes("run_c.py", answers["run_c.py"]) == []


def test_the_blank_stub_states_every_key_the_grader_checks():
    nb = student.student_notebook(nbformat.read(NOTEBOOKS_DIR / "16-when-it-breaks.ipynb", as_version=4))
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "diagnose"]
    assert 'raise NotImplementedError("not done yet: diagnose")' in cell.source
    said = ['"rank": an int', "None when every rank runs the same lines", '"FILE:LINE"', "the line number",
            "KeyError", *(f'"{kind}"' for kind in KINDS)]
    assert not [s for s in said if s not in cell.source], [s for s in said if s not in cell.source]
