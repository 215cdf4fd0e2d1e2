"""The run-folder contract: where the lab's runs go, and reading what train.py wrote into one.

A finished run folder holds run.json (configuration, summary, provenance), timings.jsonl (one
record a step) and state-rank-{r}.pt; train.py moves run.json into place last.
"""

import json
import os
from pathlib import Path

from minitrain.paths import BUILD_DIR, EXPERIMENT_DIR
from minitrain.timing import BY_NAME

SINGLE_DIR = "single-process"  # where the 1-process run's files go, inside the output folder


def output_dir() -> Path:
    """Where the lab's runs and artifacts go: $MINITRAIN_LAB_OUT, else experiments/35-ddp-cpu/."""
    env = os.environ.get("MINITRAIN_LAB_OUT")
    return Path(env) if env else EXPERIMENT_DIR


def run_dir(nproc: int) -> Path:
    """The folder of the `nproc`-process run: output_dir() for 2, its single-process/ for 1."""
    return output_dir() / SINGLE_DIR if nproc == 1 else output_dir()


def scratch_dir(name: str) -> Path:
    """A folder for throw-away demo files: $MINITRAIN_LAB_SCRATCH/name, else build/lab/name."""
    env = os.environ.get("MINITRAIN_LAB_SCRATCH")
    path = (Path(env) if env else BUILD_DIR / "lab") / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def has_run(folder: Path) -> bool:
    """True when `folder` holds a finished run (train.py moves run.json into place last)."""
    return (Path(folder) / "run.json").is_file() and (Path(folder) / "timings.jsonl").is_file()


def read_timings(path: Path) -> list[dict]:
    """Per-step records of one run's timings.jsonl."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def read_run(folder: Path) -> tuple[dict, list[dict]]:
    """run.json and the timings of the run written into `folder`."""
    return json.loads((Path(folder) / "run.json").read_text()), read_timings(Path(folder) / "timings.jsonl")


PHASES = ("forward", "backward", "all-reduce", "optimizer")


def phase_medians(run: dict) -> dict[str, float]:
    """Median ms per phase; backward excludes the all-reduce time measured by the comm hook."""
    s = run["summary"]
    hook_field = BY_NAME["hook"].field  # variant B: the all-reduce inside backward
    allreduce = s[hook_field]["median"] if hook_field in s else 0.0
    return {"forward": s["forward_ms"]["median"],
            "backward": s["backward_ms"]["median"] - allreduce,
            "all-reduce": allreduce,
            "optimizer": s["optimizer_ms"]["median"]}
