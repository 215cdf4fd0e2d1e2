"""Block C's grader: a real 2-process run of the learner's train.py, whose ranks must end with DDP's
arithmetic done by hand in one process (minitrain.lab.grading.by_hand), bit for bit."""

import re
import sys
import tempfile
from pathlib import Path

from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.lab.grading.by_hand import judge_run
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.reporting.check import CheckFailed, validated_timings
from minitrain.launch import LaunchError, run_streaming
from minitrain.verify import StateFileError, compare_state_files, load_state

STEPS, WARMUP = 6, 2  # a few steps: by hand they take one process a few seconds
NOT_DONE = "not done yet"
RANK_ERROR = re.compile(r"\s*(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception)\b.*: ")  # "AttributeError: 'str' object ..."
LAUNCHER_ERROR = re.compile(r"ChildFailedError|LaunchError|torch\.distributed\.elastic")


def _rank_error(output: list[str]) -> str | None:
    """The first exception a rank printed (its traceback's last line), not the launcher's lines after it."""
    found = [line.strip() for line in output if RANK_ERROR.match(line) and not LAUNCHER_ERROR.search(line)]
    return found[0] if found else None


def grade_train_script(script: Path, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> str:
    """Run `script` (train.py) for STEPS steps in 2 processes under the lab's torchrun; its ranks' final
    weights must be DDP's arithmetic by hand, bit for bit, with one timings.jsonl line per step."""
    output: list[str] = []
    with tempfile.TemporaryDirectory(prefix="minitrain-grade-") as tmp:
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2", str(script), "--steps", str(STEPS),
                   "--warmup", str(WARMUP), "--corpus-dir", str(corpus_dir), "--out", str(out)]
        try:
            # one thread a rank, as torchrun gives 2 processes when OMP_NUM_THREADS is unset: by_hand's sums are
            # cut for one thread, and a learner's shell may set more
            run_streaming(command, echo=output.append, env={"OMP_NUM_THREADS": "1"})
        except LaunchError as e:
            if blank := [line for line in output if NOT_DONE in line]:
                raise ExerciseError(blank[0][blank[0].index(NOT_DONE):].strip(" \"')")) from e
            why = _rank_error(output) or str(e).splitlines()[-1]
            raise ExerciseError(f"train.py's 2-process run failed: {why}") from e
        try:
            comparison = compare_state_files(out / "state-rank-0.pt", out / "state-rank-1.pt")
            records = validated_timings(out / "timings.jsonl")
            states = [load_state(out / f"state-rank-{rank}.pt") for rank in (0, 1)]
        except (StateFileError, CheckFailed) as e:
            raise ExerciseError(f"after train.py's 2-process run: {e}") from e
    if len(records) != STEPS:
        raise ExerciseError(f"train.py --steps {STEPS} wrote {len(records)} lines to timings.jsonl: one per step")
    if mistake := judge_run(states, STEPS, corpus_dir):
        raise ExerciseError(f"after train.py's {STEPS}-step 2-process run {mistake} (largest |rank 0 - rank 1| "
                            f"{comparison.max_abs_diff:.1e})")
    return (f"Block C: correct. A real 2-process run of train.py ({STEPS} steps): rank 0's final weights are, bit "
            f"for bit, those of DDP's arithmetic done by hand in one process (minitrain.lab.grading.by_hand), and "
            f"{len(records)} steps were timed")
