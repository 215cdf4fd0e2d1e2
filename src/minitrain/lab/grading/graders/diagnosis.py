"""Notebook 16's exercise: the learner's diagnosis of each broken script, against the fault planted in it, which a
real 2-rank run under one tool must show first (else the script, or torch, changed: the grader says so)."""

import re
from collections.abc import Callable
from dataclasses import dataclass

from minitrain.diagnose.exercise import FOLDER as EXERCISE
from minitrain.diagnose.faults import KINDS
from minitrain.diagnose.tools import run
from minitrain.lab.grading.graders.running import ExerciseError

FIELDS = ("rank", "line", "collective", "cause")
NOT_DONE = "not done yet"


@dataclass(frozen=True)
class Planted:
    rank: int | None  # the rank that does what the others do not; None: every rank runs the same lines
    call: str  # the text of the planted line, which locates it in the script
    collective: str  # all_reduce, broadcast, barrier ... (DDP's gradient all-reduce counts as all_reduce)
    cause: str  # one of faults.KINDS
    tool: str  # the tool whose answer the real run must give
    shows: str  # a pattern the tool's answer matches when the fault shows

    def line(self, script: str) -> int:
        lines = (EXERCISE / script).read_text().splitlines()
        return next(n for n, text in enumerate(lines, 1) if self.call in text)


PLANTED = {
    "run_a.py": Planted(0, "dist.broadcast(stop", "broadcast", "skipped-collective", "hang_report", r"^hangs at run_a\.py"),
    "run_b.py": Planted(None, "dist.all_reduce(counts)", "all_reduce", "mismatched-shapes", "hang_report",
                        r"^all_reduce received a message of another size .* at run_b\.py:{line} "),
    "run_c.py": Planted(1, "history.append(weight_norms", "all_reduce", "straggler", "profiler", r"^rank 1 arrives last"),
}


def _normal(text: object) -> str:
    return re.sub(r"[\s_-]+", "", str(text).lower())


def mistakes(script: str, answer: object) -> list[str]:
    """What is wrong in the learner's answer for `script`, one item per field (none: right). Never the right value."""
    planted = PLANTED[script]
    if not isinstance(answer, dict):
        return [f"the answer is {type(answer).__name__}, not a dict with the keys {', '.join(FIELDS)}"]
    missing = [f for f in FIELDS if f not in answer]
    if missing:
        return [f"the answer has no {', '.join(missing)} (keys: {', '.join(FIELDS)})"]
    found = []
    rank = answer["rank"]
    if not (rank is None or (isinstance(rank, int) and not isinstance(rank, bool))):
        found.append(f"rank is {rank!r}: give an int, or None when every rank runs the same lines")
    elif rank != planted.rank:
        found.append("rank: not the rank that does what the others do not (None when every rank runs the same lines "
                     "and only their data differs); a rank the tool names waiting may be the one left behind")
    line = re.fullmatch(r"(?:.*?([\w.]+\.py):)?(\d+)", str(answer["line"]).strip())
    if line is None:
        found.append(f"line is {answer['line']!r}: write it as 'FILE:LINE', e.g. '{script}:12'")
    elif (line[1] not in (None, script)) or int(line[2]) != planted.line(script):
        found.append(f"line: not the line of the mistake's call in {script} (the collective only some ranks call, or "
                     "call with different shapes; a skipped backward: the backward; a straggler: its extra work)")
    if _normal(answer["collective"]).removeprefix("dist.") != _normal(planted.collective):
        found.append("collective: not the mistake's collective (the one called at its line; a skipped backward: "
                     "DDP's all_reduce; a straggler: the one the others wait in for it)")
    if _normal(answer["cause"]) not in {_normal(k) for k in KINDS}:
        found.append(f"cause is {answer['cause']!r}: one of {', '.join(KINDS)}")
    elif _normal(answer["cause"]) != _normal(planted.cause):
        found.append("cause: not what went wrong here")
    return found


def shows_fault(script: str, timeout_s: float = 2.0) -> str:
    """Run `script` on 2 real ranks under its planted fault's tool; the tool's answer, if it shows the fault."""
    planted = PLANTED[script]
    outcome = run(EXERCISE / script, planted.tool, timeout_s)
    pattern = planted.shows.format(line=planted.line(script))
    if not (outcome.answer and re.search(pattern, outcome.answer)):
        raise RuntimeError(f"{script} did not show its planted fault under {planted.tool} (answer: {outcome.answer}; "
                           f"status {outcome.status}): the script or torch changed; tell the teacher")
    return outcome.answer


def grade_diagnosis(diagnose: Callable[[str], dict], scripts: tuple[str, ...] = tuple(PLANTED)) -> str:
    """Each script's planted fault shown by a real run, then `diagnose(script)` checked field by field."""
    verdicts, wrong = [], []
    for script in scripts:
        try:
            answer = diagnose(script)
        except NotImplementedError as e:
            raise ExerciseError(f"{NOT_DONE}: diagnose ({e})") from e
        if answer is None:
            raise ExerciseError(f"{NOT_DONE}: diagnose({script!r}) returned None")
        found = mistakes(script, answer)
        shown = shows_fault(script)
        if found:
            wrong.append(f"{script}: " + "; ".join(found))
        else:
            verdicts.append(f"{script}: right (a real run under {PLANTED[script].tool}: {shown})")
    if wrong:
        raise ExerciseError("\n".join(wrong + verdicts))
    return "\n".join(verdicts)
