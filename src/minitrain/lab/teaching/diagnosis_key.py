"""Notebook 16's answer key (ex16a-c): the fault planted in each exercise script, and the tool whose answer a real run
must give first. The teacher's: the student edition leaves it out, and class grading puts it in each submission's
tree (minitrain.lab.grading.graders.diagnosis grades with it)."""

from dataclasses import dataclass

from minitrain.diagnose.exercise import FOLDER as EXERCISE


@dataclass(frozen=True)
class Planted:
    rank: int | None  # the rank that does what the others do not; None: every rank runs the same lines
    call: str  # the text of the planted line, which locates it in the script
    collective: str  # all_reduce, broadcast, barrier ... (DDP's gradient all-reduce counts as all_reduce)
    cause: str  # one of faults.KINDS
    tool: str  # the tool whose answer the real run must give
    shows: str  # a pattern the tool's answer matches when the fault shows ({line}: the planted line's number)

    def line(self, script: str) -> int:
        lines = (EXERCISE / script).read_text().splitlines()
        return next(n for n, text in enumerate(lines, 1) if self.call in text)


PLANTED = {
    "run_a.py": Planted(0, "dist.broadcast(stop", "broadcast", "skipped-collective", "hang_report", r"^hangs at run_a\.py"),
    "run_b.py": Planted(None, "dist.all_reduce(counts)", "all_reduce", "mismatched-shapes", "hang_report",
                        r"^all_reduce received a message of another size .* at run_b\.py:{line} "),
    "run_c.py": Planted(1, "history.append(weight_norms", "all_reduce", "straggler", "profiler", r"^rank 1 arrives last"),
}
