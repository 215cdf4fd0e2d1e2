"""The runs of the scaling matrix: CPU configurations and model sizes, and one real run of the lab's
train.py under the lab's torchrun with a configuration's threads (and, if pinned, one core).
"""

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from minitrain.lab.reporting.runs import phase_medians, read_run
from minitrain.launch import run_streaming, torchrun_command
from minitrain.measure.measurement import as_typed
from minitrain.paths import TRAIN_SCRIPT
from minitrain.provenance import usable_cores
from minitrain.train import TrainConfig

RUN_TIMEOUT_S = 900

BLOCK_SIZE = TrainConfig.block_size
WEAK_BATCH = TrainConfig.batch_size  # sequences per rank, whatever the number of processes (the sheet's setting)
STRONG_GLOBAL_BATCH = TrainConfig.batch_size  # sequences per step in total, split across the processes
SCALINGS = ("weak", "strong")

ONE_THREAD, ALL_CORES, TWO_PROCS, PINNED = "1proc-1thread", "1proc-allcores", "2proc-1thread", "2proc-pinned"


@dataclass(frozen=True)
class Config:
    """How a run uses the CPU: processes, threads per process, and an optional single core for all."""

    name: str
    label: str
    nproc: int
    threads: int
    pin_core: int | None = None


@dataclass(frozen=True)
class Size:
    """A MiniGPT size, and how many steps to run it: bigger models take longer, steadier steps."""

    n_layer: int
    n_embd: int
    steps: int
    warmup: int
    n_head: int = 4


# ~0.27M (the lab's default model), ~0.86M, ~1.9M and ~4.9M parameters. At least 10 warm-up steps
# (DDP rebuilds its buckets after step 1; caches settle) and 25 measured ones at every size: fewer
# made single points jump (0.86M once read 35% all-reduce from 12 steps). About 13 minutes on 2 cores.
SIZES = (Size(2, 96, 60, 20), Size(4, 128, 45, 15), Size(4, 192, 40, 12), Size(6, 256, 35, 10))
QUICK_SIZE = Size(2, 96, 4, 2)


def configurations() -> list[Config]:
    """The four configurations on this machine; the pinned one uses the first core we may run on."""
    cores = usable_cores()
    first_core = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    return [Config(ONE_THREAD, "1 process x 1 thread", 1, 1),
            Config(ALL_CORES, f"1 process x {cores} threads", 1, cores),
            Config(TWO_PROCS, "2 processes x 1 thread", 2, 1),
            Config(PINNED, "2 processes pinned to 1 core", 2, 1, pin_core=first_core)]


def batches(config: Config, scalings: tuple[str, ...]) -> dict[int, list[str]]:
    """Per-rank batch -> the scalings a run with it serves (one 1-process run serves both)."""
    served: dict[int, list[str]] = defaultdict(list)
    for scaling in scalings:
        batch = WEAK_BATCH if scaling == "weak" else STRONG_GLOBAL_BATCH // config.nproc
        served[batch].append(scaling)
    return dict(served)


def launch_command(config: Config, size: Size, batch: int, out: Path, corpus_dir: Path) -> list[str]:
    """The lab's loopback torchrun with the configuration's threads and, if pinned, one core.

    torchrun would set OMP_NUM_THREADS=1 itself for 2 processes; we set it for every run so each
    configuration's threads are explicit. taskset's affinity is inherited by torchrun's workers.
    """
    command = ["env", f"OMP_NUM_THREADS={config.threads}", *torchrun_command(
        TRAIN_SCRIPT, config.nproc, "--steps", str(size.steps), "--warmup", str(size.warmup),
        "--batch-size", str(batch), "--block-size", str(BLOCK_SIZE), "--n-layer", str(size.n_layer),
        "--n-head", str(size.n_head), "--n-embd", str(size.n_embd), "--timing", "hook",
        "--out", str(out), "--corpus-dir", str(corpus_dir))]
    return command if config.pin_core is None else ["taskset", "-c", str(config.pin_core), *command]


def measure(config: Config, size: Size, batch: int, scalings: list[str], out: Path,
            corpus_dir: Path) -> dict:
    """One real run into `out`; its configuration, throughput, step breakdown and ranks' cores."""
    command = launch_command(config, size, batch, out, corpus_dir)
    load, start = os.getloadavg()[0], time.perf_counter()
    run_streaming(command, timeout=RUN_TIMEOUT_S, echo=lambda line: None)  # a failure shows its tail
    wall = time.perf_counter() - start
    run, _ = read_run(out)
    summary = run.summary
    return {
        "config": config.name, "scaling": scalings, "nproc": config.nproc,
        "threads_configured": config.threads, "pinned_core": config.pin_core,
        "batch_size_per_rank": batch, "global_batch": batch * config.nproc, "block_size": BLOCK_SIZE,
        "model_config": run.model_config, "params": run.model_params,
        "steps": run.steps, "warmup_steps": run.warmup_steps,
        "tokens_per_sec": run.tokens_per_sec, "step_ms": summary["step_ms"],
        "step_breakdown_ms": phase_medians(run),
        "allreduce_share": summary["allreduce_ms"]["median"] / summary["step_ms"]["median"],
        "threads_per_rank": run.threads_per_rank,
        "ranks": run.ranks,
        "load_average_1min": load, "wall_s": wall, "command": as_typed(command),
    }
