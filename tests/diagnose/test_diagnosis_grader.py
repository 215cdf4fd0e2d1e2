"""Notebook 16's exercise grader (ex16a-c), with the teacher's key: a blank stops before any process, right answers in
the forms the lab's tools print pass on a real run, and the wrong answers a learner gives are each named, costing
their script's point only; without the key (the student edition) a right and a wrong answer read the same. (The
reference passes in notebook 16's grader cell and in class grading, test_grade's, both on real runs.) The student
edition leaves this file out: RIGHT is the key."""

import nbformat
import pytest

from minitrain.diagnose.exercise import CAUSES, FOLDER as EXERCISE
from minitrain.lab.editions import student_edition
from minitrain.lab.grading.graders import diagnosis
from minitrain.lab.grading.graders.diagnosis import BY_TEACHER, grade_diagnosis, mistakes
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.teaching.diagnosis_key import PLANTED
from minitrain.lab.todos.blank import stub, told
from minitrain.paths import NOTEBOOKS_DIR
from minitrain.todo import NotDone


def line_of(script: str, text: str) -> int:
    """The number of the one line of `script` holding `text`."""
    [number] = [n for n, line in enumerate((EXERCISE / script).read_text().splitlines(), 1) if text in line]
    return number


LINE = {script: min(planted.lines(script)) for script, planted in PLANTED.items()}
RIGHT = {
    "run_a.py": {"rank": 1, "step": 8, "line": f"run_a.py:{LINE['run_a.py']}", "collective": "all_reduce",
                 "cause": "skipped-backward"},
    "run_b.py": {"rank": 0, "step": 14, "line": f"run_b.py:{LINE['run_b.py']}", "collective": "all_reduce",
                 "cause": "uneven-shard"},
    "run_c.py": {"rank": 1, "step": 23, "line": f"run_c.py:{LINE['run_c.py']}", "collective": "all_reduce",
                 "cause": "early-exit"},
}
OTHER_FORMS = {  # right answers as the lab's tools print them, another line of the same fault
    "run_a.py": {**RIGHT["run_a.py"], "line": f"run_a.py:{line_of('run_a.py', 'continue')} in main",
                 "collective": "torch.distributed.all_reduce", "cause": "Skipped backward"},
    "run_b.py": {**RIGHT["run_b.py"], "line": f'File "src/minitrain/diagnose/exercise/run_b.py", line '
                 f'{line_of("run_b.py", "steps_per_epoch = len")}, in main', "collective": "gloo:all_reduce",
                 "cause": "uneven_shard"},
    "run_c.py": {**RIGHT["run_c.py"], "line": f"main (run_c.py:{line_of('run_c.py', 'break')})",
                 "collective": "c10d::allreduce_", "cause": "EARLY EXIT"},
}
def test_a_blank_diagnose_stops_before_any_process_starts(monkeypatch):
    def blank(script: str) -> dict:
        raise NotDone("diagnose")

    def no_run(*args, **kwargs):
        raise AssertionError("a run was started")
    monkeypatch.setattr(diagnosis, "run", no_run)
    with pytest.raises(NotDone) as stop:
        grade_diagnosis(blank)
    assert told(stop.value) == "not done yet: diagnose (not done yet: diagnose)"


@pytest.mark.parametrize("script", PLANTED)
def test_right_answers_in_the_tools_forms_pass(script):
    assert mistakes(script, RIGHT[script], PLANTED[script]) == []
    assert mistakes(script, OTHER_FORMS[script], PLANTED[script]) == []
    assert mistakes(script, {**RIGHT[script], "line": LINE[script], "collective": "allreduce"}, PLANTED[script]) == []


def test_a_right_answer_in_another_form_passes_on_a_real_run():
    assert grade_diagnosis(OTHER_FORMS.__getitem__, ("run_a.py",)).startswith("run_a.py: right (a real run")


@pytest.mark.parametrize("script, wrong, named", [
    # the hurried learner: the rank, line and collective hang_report names (rank 1, aborting in evaluate's
    # all-reduce at the end of the epoch), the step the run fails at
    ("run_b.py", {"rank": 1, "step": 15, "line": f"run_b.py:{line_of('run_b.py', 'dist.all_reduce(total)')}",
                  "collective": "all_reduce", "cause": "mismatched-shapes"}, ("rank:", "step:", "line:", "cause:")),
    # run_a: the log's all-reduce, where rank 1 aborts, taken for the root cause, and its step
    ("run_a.py", {**RIGHT["run_a.py"], "step": 11, "line": f"run_a.py:{line_of('run_a.py', 'dist.all_reduce(logged)')}"},
     ("step:", "line:")),
    # run_c: the barrier the culprit waits in, taken for the collective and the line
    ("run_c.py", {**RIGHT["run_c.py"], "line": f"run_c.py:{line_of('run_c.py', 'dist.barrier()')}",
                  "collective": "barrier", "cause": "barrier-on-one-rank"}, ("line:", "collective:", "cause:")),
    # run_c: the rank left waiting in backward taken for the culprit, and the step it waits at
    ("run_c.py", {**RIGHT["run_c.py"], "rank": 0, "step": 24}, ("rank:", "step:")),
    # the frame torch's traceback ends in, not the script's
    ("run_a.py", {**RIGHT["run_a.py"], "line": "distributed_c10d.py:3252 in all_reduce"}, ("line:",)),
    # a GPU tutorial's habit: an NCCL timeout, ranks and steps as strings
    ("run_c.py", {"rank": "1", "step": "23", "line": "run_c.py:95", "collective": "all_reduce", "cause": "NCCL timeout"},
     ("rank is '1'", "step is '23'", "cause is 'NCCL timeout'")),
    ("run_a.py", {**RIGHT["run_a.py"], "line": "run_a.py:109, run_a.py:110"}, ("line is",)),
    ("run_a.py", {"rank": 1, "line": "run_a.py"}, ("has no step, collective, cause",)),
    ("run_b.py", ["rank", None], ("not a dict",)),
])
def test_each_wrong_answer_is_named_field_by_field(script, wrong, named):
    found = mistakes(script, wrong, PLANTED[script])
    assert len(found) == len(named) and all(n in f for n, f in zip(named, found)), found
    given = str(wrong.get("line", "")) if isinstance(wrong, dict) else ""
    assert not any(f"{script}:{n}" in f.replace(given, "") for f in found
                   for n in PLANTED[script].lines(script))  # never the answer (only the learner's own, quoted)


def test_a_wrong_answer_costs_its_own_script_only_on_a_real_run():
    answers = {**RIGHT, "run_a.py": {**RIGHT["run_a.py"], "rank": 0}}
    with pytest.raises(ExerciseError, match=r"^run_a\.py: rank:"):
        grade_diagnosis(answers.__getitem__, ("run_a.py",))
    assert mistakes("run_b.py", answers["run_b.py"], PLANTED["run_b.py"]) == []


def test_without_the_key_a_right_and_a_wrong_answer_read_the_same(monkeypatch):
    """The student edition (no minitrain.lab.teaching.diagnosis_key: test_student runs it there for real)."""
    monkeypatch.setattr(diagnosis, "the_key", lambda: None)
    wrong = {script: {**answer, "rank": 7, "step": 0, "cause": "straggler"} for script, answer in RIGHT.items()}
    verdicts = {grade_diagnosis(answers.__getitem__) for answers in (RIGHT, OTHER_FORMS, wrong)}
    assert len(verdicts) == 1 and verdicts.pop().startswith(BY_TEACHER)
    assert "line is 'here'" in grade_diagnosis(lambda script: {**RIGHT[script], "line": "here"})  # its form, still


def test_the_blank_stub_states_every_key_the_grader_checks():
    nb = student_edition.student_notebook(nbformat.read(NOTEBOOKS_DIR / "16-when-it-breaks.ipynb", as_version=4))
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "diagnose"]
    assert stub("diagnose") in cell.source
    said = ['"rank": an int', "None when every rank runs the same lines", '"step": an int', '"FILE:LINE"',
            "the line number", "where the culprit's path parts", "KeyError", *(f'"{cause}"' for cause in CAUSES)]
    assert not [s for s in said if s not in cell.source], [s for s in said if s not in cell.source]
