"""The run-folder contract: where the lab's runs go, and reading what train.py wrote into one.

A finished run folder holds run.json (configuration, summary, provenance), timings.jsonl (one
record a step) and state-rank-{r}.pt; train.py moves them into place in name order, so
timings.jsonl comes last.
"""

import json
import os
from pathlib import Path

from minitrain.cli import lab_out_folder
from minitrain.paths import BUILD_DIR, EXPERIMENT_DIR
from minitrain.run_record import RunRecord
from minitrain.timing import BY_NAME

SINGLE_DIR = "single-process"  # where the 1-process run's files go, inside the output folder
REPEATS_DIR = "repeats"  # the 1-vs-2 comparison's repeats: repeats/r{i}-{n}proc/, inside the output folder


def output_dir() -> Path:
    """Where the lab's runs and artifacts go: $MINITRAIN_LAB_OUT (checked), else experiments/35-ddp-cpu/."""
    return lab_out_folder() or EXPERIMENT_DIR


def run_dir_in(out: Path, nproc: int) -> Path:
    """The folder of the sheet's `nproc`-process run in an output folder: `out` for 2, its single-process/ for 1."""
    return Path(out) / SINGLE_DIR if nproc == 1 else Path(out)


def run_dir(nproc: int) -> Path:
    """The folder of the sheet's `nproc`-process run in output_dir()."""
    return run_dir_in(output_dir(), nproc)


def scratch_dir(name: str) -> Path:
    """A folder for throw-away demo files: $MINITRAIN_LAB_SCRATCH/name, else build/lab/name."""
    env = os.environ.get("MINITRAIN_LAB_SCRATCH")
    path = (Path(env) if env else BUILD_DIR / "lab") / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def repeat_dir(out: Path, repeat: int, nproc: int) -> Path:
    """The folder of one repeat of the 1-vs-2 comparison."""
    return Path(out) / REPEATS_DIR / f"r{repeat}-{nproc}proc"


def read_repeats(out: Path) -> dict[int, list[RunRecord]]:
    """run.json of every repeat in `out`, by process count, in repeat order."""
    found: dict[int, list[RunRecord]] = {1: [], 2: []}
    for folder in sorted((Path(out) / REPEATS_DIR).glob("r*-*proc"), key=lambda p: int(p.name[1:].split("-")[0])):
        if has_run(folder):
            run, _ = read_run(folder)
            found[run.world_size].append(run)
    return found


def has_run(folder: Path) -> bool:
    """True when `folder` holds run.json and timings.jsonl. train.py moves its files into place in
    name order, timings.jsonl last, so in a new folder this means a finished run; over an older run
    it holds throughout, and the new run is finished only when train.py has exited."""
    return (Path(folder) / "run.json").is_file() and (Path(folder) / "timings.jsonl").is_file()


def read_timings(path: Path) -> list[dict]:
    """Per-step records of one run's timings.jsonl."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def read_run(folder: Path) -> tuple[RunRecord, list[dict]]:
    """run.json and the timings of the run written into `folder`."""
    return RunRecord.read(Path(folder) / "run.json"), read_timings(Path(folder) / "timings.jsonl")


def throughput(run: RunRecord) -> float:
    """Global tokens per second at the run's median step time: one statistic, so that the 2-vs-1
    ratio is exactly 2 x (1-process step) / (2-process step)."""
    tokens = run.batch_size_per_rank * run.block_size * run.world_size
    return tokens / (run.summary["step_ms"]["median"] / 1e3)


PHASES = ("forward", "backward", "all-reduce", "optimizer")


def phase_medians(run: RunRecord) -> dict[str, float]:
    """Median ms per phase of a step; backward is loss.backward() without the comm hook's
    all-reduce, subtracted step by step (train.py's backward_outside_hook_ms)."""
    s = run.summary
    hook = BY_NAME["hook"].field
    return {"forward": s["forward_ms"]["median"], "backward": s["backward_outside_hook_ms"]["median"],
            "all-reduce": s[hook]["median"] if hook in s else 0.0, "optimizer": s["optimizer_ms"]["median"]}
