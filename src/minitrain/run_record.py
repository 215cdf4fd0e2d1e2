"""What train.py leaves behind: every rank's state-rank-{rank}.pt, and rank 0's timings.jsonl (one line
a step) and run.json, one typed record (RunRecord: configuration, summary, provenance). Each rank
stages its files and they move into place only once every rank has written, so a crashed run never
leaves a set that looks complete."""

import argparse
import contextlib
import json
import os
import secrets
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.artifacts import field_problems, read_json_object
from minitrain.data import SEED_BASE
from minitrain.model import count_parameters
from minitrain.paths import relative
from minitrain.provenance import provenance, rank_facts
from minitrain.comm_hook import InstrumentedHook
from minitrain.timing import VARIANTS, summarize

TIMED = ("step_ms", "forward_ms", "backward_ms", "optimizer_ms", *(v.field for v in VARIANTS))


class RunRecordError(ValueError):
    """run.json cannot be read as a RunRecord; the message names the file, the problem and the fix."""


@dataclass
class RunRecord:
    """What train.py's rank 0 writes to run.json after a run, field for field."""

    run_id: str  # names this run wherever its numbers are shown
    world_size: int
    launcher: str  # "torchrun" or "spawn"
    timing: list[str]  # the timing variants on in this run ("barrier", "hook")
    steps: int
    warmup_steps: int
    batch_size_per_rank: int
    block_size: int
    lr: float
    model_config: dict[str, int]  # n_layer, n_head, n_embd
    comm: str  # the comm hook: "allreduce", or "noop" as a control
    no_sync: bool
    seed_base: int
    threads_per_rank: int
    model_params: int
    buckets: list[dict[str, int]] | None  # {"index", "bytes"} per DDP gradient bucket; None if the hook never ran
    summary: dict[str, dict[str, float]]  # step_ms, forward_ms, ... -> mean, median, p95 over the measured steps
    tokens_per_sec: dict[str, float]  # mean, median, p95, min, max over the measured steps
    shard_sentences: list[int]  # per rank
    first_sentences: list[str]  # per rank
    ranks: list[dict]  # per rank: rank, pid, seed, affinity, threads, omp_num_threads
    torch: str
    python: str
    platform: str
    cpu_model: str
    cores: int
    sitting: str  # minitrain.provenance.sitting(): this boot of this CPU and kernel
    load_average_1min: float
    date: str
    corpus_sha256: str
    command: str  # the command line that started the run, paths relative to the repository
    restart: dict | None = None  # attempt, max_restarts, snapshot_every, faults, ...: only with snapshots or faults

    def write(self, path: Path) -> None:
        """Write run.json (no "restart" key when there is no restart record, as before)."""
        record = {k: v for k, v in asdict(self).items() if k != "restart" or v is not None}
        Path(path).write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        """Read run.json, or RunRecordError naming the file, what is wrong and the fix."""
        path = Path(path)
        rerun = f"re-run train.py into {path.parent}"
        data = read_json_object(path, RunRecordError, str(path), f"run train.py into {path.parent}", rerun)
        if found := field_problems(cls, data, optional=("restart",)):
            raise RunRecordError(f"{path} {found}: not written by this train.py; re-run it into {path.parent}")
        return cls(**data)


def write_run_files(args: argparse.Namespace, model: torch.nn.Module, records: list[dict],
                    hook: InstrumentedHook, shards: dict, restart: dict | None) -> None:
    """Stage this rank's files under args.out, then move them into place once every rank has written
    (a collective: the folder may be shared, one machine, or each machine's own disk, two machines)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ranks = [None] * world_size  # each rank's pid, cores and threads
    dist.all_gather_object(ranks, {"rank": rank} | rank_facts())
    staging = args.out / f".staging-{world_size}proc"
    if rank == 0:
        shutil.rmtree(staging, ignore_errors=True)  # a crashed run's leftovers
    dist.barrier()
    staging.mkdir(parents=True, exist_ok=True)
    mine = [f"state-rank-{rank}.pt"] + (["timings.jsonl", "run.json"] if rank == 0 else [])
    torch.save(model.state_dict(), staging / mine[0])
    if rank == 0:
        with open(staging / "timings.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        run_record(args, model, records, hook, world_size, shards | {"ranks": ranks}, restart).write(staging / "run.json")
    dist.barrier()  # every rank's files are on disk before anything moves into place
    for name in mine:
        os.replace(staging / name, args.out / name)
    dist.barrier()
    with contextlib.suppress(FileNotFoundError):  # on a shared folder another rank may have removed it
        staging.rmdir()
    if rank == 0:
        print(f"wrote {', '.join(sorted(p.name for p in args.out.glob('*') if p.suffix in ('.pt', '.jsonl', '.json')))} "
              f"to {relative(args.out)}", flush=True)


def run_record(args: argparse.Namespace, model: torch.nn.Module, records: list[dict], hook: InstrumentedHook,
               world_size: int, facts: dict, restart: dict | None) -> RunRecord:
    """run.json: the run's configuration, the summary of the steps after the warm-up, provenance."""
    measured = records[args.warmup:]
    summary = {key: summarize([r[key] for r in measured]) for key in TIMED if measured[0][key] is not None}
    # loss.backward() minus the hook's all-reduce, step by step (medians do not subtract): backward's
    # compute and DDP's bucket copies; with variant A on, its two barriers too (the repeats run without)
    summary["backward_outside_hook_ms"] = summarize([r["backward_ms"] - (r["allreduce_ms"] or 0.0) for r in measured])
    tokens_per_sec = [r["tokens"] / (r["step_ms"] / 1e3) for r in measured]
    return RunRecord(**{
        "run_id": secrets.token_hex(4),  # names this run wherever its numbers are shown
        "world_size": world_size,
        "launcher": args.launcher,
        "timing": args.timing,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "batch_size_per_rank": args.batch_size,
        "block_size": args.block_size,
        "lr": args.lr,
        "model_config": {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd},
        "comm": args.comm,
        "no_sync": args.no_sync,
        "seed_base": getattr(args, "seed", SEED_BASE),
        "threads_per_rank": torch.get_num_threads(),
        "model_params": count_parameters(model),
        "buckets": [{"index": i, "bytes": b["bytes"]} for i, b in sorted(hook.buckets.items())] or None,
        "summary": summary,
        "tokens_per_sec": summarize(tokens_per_sec) | {"min": min(tokens_per_sec), "max": max(tokens_per_sec)},
        **facts,
        **provenance(args.corpus_dir),
        "command": launch_command(args, world_size),
        "restart": restart,
    })


def launch_command(args: argparse.Namespace, world_size: int) -> str:
    """The command line that started this run, as a reader would type it from the repository
    (paths inside it relative, so the command works on any machine)."""
    if "MINITRAIN_LAUNCH_COMMAND" in os.environ:  # set by the lab's loopback-only torchrun
        words = os.environ["MINITRAIN_LAUNCH_COMMAND"].split()
    elif args.launcher == "spawn":
        words = ["python", *sys.argv]
    else:
        words = ["torchrun", "--standalone", f"--nproc-per-node={world_size}", *sys.argv]
    return " ".join(relative(w) if os.path.isabs(w) else w for w in words)
