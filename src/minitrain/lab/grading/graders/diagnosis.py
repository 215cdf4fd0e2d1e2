"""Notebook 16's exercise (ex16a-c): the learner's diagnosis of each broken script, its form checked here, its keys
against the script's fault, which a real 2-rank run under one tool must show first (else the script, or torch,
changed: the grader says so). The faults are the teacher's key (minitrain.lab.teaching.diagnosis_key), which the
student edition leaves out: there a diagnosis is "graded by your teacher", and class grading checks the learner's
answers with the key in its own process (graded_by_key), never where the learner's code runs. The fixes are graded
apart, by running them (graders.fixes)."""

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from minitrain.diagnose.exercise import CAUSES, FOLDER as EXERCISE, SCRIPTS
from minitrain.diagnose.tools import run
from minitrain.lab.grading.graders.learner import solution_cell
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.todo import NotDone

if TYPE_CHECKING:
    from minitrain.lab.teaching.diagnosis_key import Planted

FIELDS = ("rank", "step", "line", "collective", "cause")
BY_TEACHER = "graded by your teacher"
KEY_MODULE = "minitrain.lab.teaching.diagnosis_key"
LOCATION = re.compile(r'([\w.-]+\.py)"?(?::|,?\s+line\s+)(\d+)')  # run_a.py:12, File "run_a.py", line 12
COLLECTIVE = re.compile(r"^(?:.*[.:])?(\w+?)_?(?:\(.*\))?$")  # torch.distributed.broadcast, gloo:all_reduce, c10d::allreduce_


def _normal(text: object) -> str:
    return re.sub(r"[\s_-]+", "", str(text).lower())


def location(line: object) -> tuple[str | None, int] | None:
    """(file or None, number) of a "line" answer in a form the lab's tools print (run_a.py:12, run_a.py:12 in main,
    File ".../run_a.py", line 12, main (run_a.py:12), 12); None: not one place."""
    places = set(LOCATION.findall(str(line)))
    if len(places) == 1:
        [(file, number)] = places
        return file, int(number)
    bare = re.fullmatch(r"\s*(?:line\s+)?(\d+)\s*", str(line))
    return (None, int(bare[1])) if bare else None


def collective(text: object) -> str:
    """A collective's name as the tools print it, normalised: torch.distributed.all_reduce, gloo:all_reduce -> allreduce."""
    found = COLLECTIVE.match(str(text).strip())
    return _normal(found[1] if found else text)


def form_mistakes(script: str, answer: object) -> list[str]:
    """What in the answer for `script` is not in the stub's form (no key needed: nothing about the answer itself)."""
    if not isinstance(answer, dict):
        return [f"the answer is {type(answer).__name__}, not a dict with the keys {', '.join(FIELDS)}"]
    missing = [f for f in FIELDS if f not in answer]
    if missing:
        return [f"the answer has no {', '.join(missing)} (keys: {', '.join(FIELDS)})"]
    found = []
    rank, step = answer["rank"], answer["step"]
    if not (rank is None or _integer(rank)):
        found.append(f"rank is {rank!r}: give an int, or None when every rank runs the same lines")
    if not (_integer(step) and step >= 0):
        found.append(f"step is {step!r}: give an int, the script's `step` (from 0)")
    if location(answer["line"]) is None:
        found.append(f"line is {answer['line']!r}: write one place as 'FILE:LINE', e.g. '{script}:12'")
    if _normal(answer["cause"]) not in {_normal(k) for k in CAUSES}:
        found.append(f"cause is {answer['cause']!r}: one of {', '.join(CAUSES)}")
    return found


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def mistakes(script: str, answer: object, planted: "Planted") -> list[str]:
    """What is wrong in the learner's answer for `script` against its `planted` fault, one item per field (none:
    right). Never the right value."""
    found = form_mistakes(script, answer)
    if found:
        return found
    if answer["rank"] != planted.rank:
        found.append("rank: not the culprit as the cause's definition names it; the rank a tool names waiting, or the "
                     "one that fails, may be the one left behind")
    if answer["step"] != planted.step:
        found.append("step: not the step at which the culprit's path parts from the others' (the run fails later "
                     "than that, and rank 0's log may not say)")
    file, number = location(answer["line"])
    if file not in (None, script) or number not in planted.lines(script):
        found.append(f"line: not a line of {script} where the culprit's path parts from the others', or that makes the "
                     "ranks' counts or decisions differ (the line where a tool says a rank waits or fails shows the "
                     "fault, it does not make it)")
    if collective(answer["collective"]) != collective(planted.collective):
        found.append("collective: not the first one the culprit skips (the others call it) or adds (the others do "
                     "not); DDP's gradient all-reduce, in backward, is all_reduce")
    if _normal(answer["cause"]) != _normal(planted.cause):
        found.append("cause: not what went wrong here")
    return found


@functools.cache  # once per process: class grading checks every submission's answers against the same runs
def shows_fault(script: str, planted: "Planted", timeout_s: float = 2.0) -> str:
    """Run `script` on 2 real ranks under its planted fault's tool; the tool's answer, if it shows the fault."""
    outcome = run(EXERCISE / script, planted.tool, timeout_s)
    if not (outcome.answer and re.search(planted.shows, outcome.answer)):
        raise RuntimeError(f"{script} did not show its fault under {planted.tool} (answer: {outcome.answer}; "
                           f"status {outcome.status}): the script or torch changed; tell the teacher")
    return outcome.answer


def the_key() -> "dict[str, Planted] | None":
    """The scripts' faults (the teacher's key), or None where the key is not (the student edition)."""
    try:
        from minitrain.lab.teaching.diagnosis_key import PLANTED
    except ModuleNotFoundError as e:
        if e.name != KEY_MODULE:
            raise
        return None
    return PLANTED


def grade_diagnosis(diagnose: Callable[[str], dict], scripts: tuple[str, ...] = SCRIPTS) -> str:
    """`diagnose(script)` for each script (a blank stops first); with the teacher's key, each script's fault shown by a
    real run, then the answer checked key by key; without it, "graded by your teacher" and the form."""
    answers = {}
    for script in scripts:
        try:
            answers[script] = diagnose(script)
        except NotImplementedError as e:
            raise NotDone(f"diagnose ({blank.told(e)})") from e
        if answers[script] is None:
            raise NotDone(f"diagnose({script!r}) returned None")
    if the_key() is None:
        form = [f"{script}: " + "; ".join(found) for script, answer in answers.items()
                if (found := form_mistakes(script, answer))]
        return (f"{BY_TEACHER}, in class grading: the answer key is not in this tree; "
                + ("before you hand it in, its form: " + " | ".join(form) if form else
                   f"its form is right ({len(FIELDS)} keys, each of its kind)"))
    return graded_by_key(answers)


def graded_by_key(answers: dict[str, object]) -> str:
    """The learner's answer for each script checked against the key, after a real run shows the script's fault."""
    key = the_key()
    verdicts, wrong = [], []
    for script, answer in answers.items():
        found = mistakes(script, answer, key[script])
        shown = shows_fault(script, key[script])
        if found:
            wrong.append(f"{script}: " + "; ".join(found))
        else:
            verdicts.append(f"{script}: right (a real run under {key[script].tool}: {shown})")
    if wrong:
        raise ExerciseError("\n".join(wrong + verdicts))
    return "\n".join(verdicts)


class ByTeacher(Exception):
    """A diagnosis graded only where the teacher's key is (class grading); the message says so, `answer` is the
    learner's, which goes back to the class grading's process."""

    def __init__(self, verdict: str, answer: object) -> None:
        super().__init__(verdict)
        self.answer = answer


def grade_ex16(repo: Path, todo: Todo) -> str:
    """One of notebook 16's scripts (ex16a is run_a.py): the learner's diagnose, from its solution cell; without the key
    (the student edition) ByTeacher, carrying their answer."""
    script, given = f"run_{todo.key[-1]}.py", {}
    with solution_cell(repo, todo, "diagnose") as (learner, _):
        verdict = grade_diagnosis(lambda s: given.setdefault(s, learner(s)), (script,))
    if verdict.startswith(BY_TEACHER):
        raise ByTeacher(verdict, given[script])
    return verdict
