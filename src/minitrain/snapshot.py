"""Snapshots for resuming a run after a failure: one folder per step, one file per rank, and a
COMPLETE marker written last, so that a snapshot interrupted mid-write is never loaded.

    snapshots/step-000040/rank-0.pt, rank-1.pt   each rank's state, written to a temporary file,
                                                  fsync'ed, then renamed into place
    snapshots/step-000040/COMPLETE                written by rank 0 once every rank's file is on
                                                  disk: the step, and each file's size and sha256

A folder without its marker, or whose files do not match it (truncated, torn), is named and skipped;
the newest one that is complete is used. Rank 0 decides and tells the others, so every rank resumes
from the same step. The folder must be one all ranks see (one machine here).
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.artifacts import write_atomic, write_json
from minitrain.cli import positive_int
from minitrain.paths import relative

SNAPSHOTS = "snapshots"  # train.py's folder for them, under --out
MARKER = "COMPLETE"
KEEP = 2  # complete snapshots kept: the newest, and the one before in case the newest turns out bad


@dataclass
class Found:
    """The newest complete snapshot (None: start from scratch) and one line per folder skipped."""

    folder: Path | None
    step: int | None
    skipped: list[str] = field(default_factory=list)


def step_folder(root: Path, step: int) -> Path:
    """The folder of the snapshot taken after `step` steps."""
    return Path(root) / f"step-{step:06d}"


def rank_file(rank: int) -> str:
    return f"rank-{rank}.pt"


def write_durable(path: Path, write) -> None:
    """write_atomic, with the file's bytes and the folder's entry fsync'ed: after a crash the file is
    the old one, or the new one whole, never a half-written one under its final name."""
    def fill(tmp: Path) -> None:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())

    write_atomic(path, fill)
    _fsync_folder(Path(path).parent)


def _fsync_folder(folder: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):  # POSIX: a rename is durable once its folder is fsync'ed
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def file_facts(path: Path) -> dict:
    """Size and sha256 of a file, as the marker records them."""
    data = Path(path).read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def save_rank_state(root: Path, step: int, rank: int, state: dict) -> dict:
    """Write this rank's state into the step's folder, durably; return its file's facts."""
    folder = step_folder(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / rank_file(rank)
    write_durable(path, lambda tmp: torch.save(state, tmp))
    return {"file": path.name} | file_facts(path)


def mark_complete(root: Path, step: int, files: list[dict]) -> None:
    """Write the step's COMPLETE marker (last, durably), then drop the older snapshots but the newest
    KEEP complete ones (incomplete ones included: a newer complete one supersedes them)."""
    folder = step_folder(root, step)
    marker = {"step": step, "world_size": len(files), "files": files}
    write_durable(folder / MARKER, lambda tmp: tmp.write_text(json.dumps(marker, indent=2) + "\n"))
    older = [f for f in sorted(Path(root).glob("step-*")) if f.name < folder.name]
    kept = [f for f in older if (f / MARKER).is_file()][-(KEEP - 1):] if KEEP > 1 else []
    for old in older:
        if old not in kept:
            shutil.rmtree(old, ignore_errors=True)


def check(folder: Path, world_size: int) -> str | None:
    """Why the snapshot in `folder` cannot be loaded, or None when it is complete."""
    marker = folder / MARKER
    if not marker.is_file():
        return "no COMPLETE marker: interrupted while it was written"
    try:
        facts = json.loads(marker.read_text())
        files = {f["file"]: f for f in facts["files"]}
    except (ValueError, KeyError, TypeError):
        return "its COMPLETE marker is unreadable"
    if facts.get("world_size") != world_size:
        return f"taken by {facts.get('world_size')} ranks, this run has {world_size}"
    for rank in range(world_size):
        name = rank_file(rank)
        path = folder / name
        if name not in files or not path.is_file():
            return f"{name} is missing"
        found = file_facts(path)
        if found["bytes"] != files[name]["bytes"]:
            return f"{name} is {found['bytes']} bytes, COMPLETE says {files[name]['bytes']} (truncated)"
        if found["sha256"] != files[name]["sha256"]:
            return f"{name} does not match its checksum in COMPLETE (torn or changed)"
    return None


def newest_complete(root: Path, world_size: int) -> Found:
    """The newest snapshot in `root` that is complete, and a line for each newer one skipped."""
    skipped = []
    for folder in sorted(Path(root).glob("step-*"), reverse=True):
        if not folder.is_dir():
            continue
        why = check(folder, world_size)
        if why is None:
            return Found(folder, int(folder.name.removeprefix("step-")), skipped)
        skipped.append(f"snapshot {relative(folder)} skipped: {why}")
    return Found(None, None, skipped)


def agree_on_snapshot(root: Path) -> Found:
    """Rank 0 picks the newest complete snapshot and every rank receives its choice (a collective)."""
    choice = [newest_complete(root, dist.get_world_size()) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(choice, src=0)
    return choice[0]


def save_snapshot(root: Path, step: int, state: dict) -> Path:
    """Every rank writes its state for `step`; once all are on disk, rank 0 marks the snapshot complete
    (a collective: every rank calls it at the same step). Returns the snapshot's folder."""
    facts = save_rank_state(root, step, dist.get_rank(), state)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, facts)  # doubles as the barrier: every file is on disk after it
    if dist.get_rank() == 0:
        mark_complete(root, step, every)
    return step_folder(root, step)


def load_rank_state(folder: Path, rank: int) -> dict:
    """This rank's state from a complete snapshot (tensors and plain values only: weights_only)."""
    return torch.load(Path(folder) / rank_file(rank), map_location="cpu", weights_only=True)


# ------------------------------------------------------------------------------------------------
# train.py's use of them: --snapshot-every K, and the resume after torchrun's agent restarts the workers

PROGRESS = "progress.json"  # in SNAPSHOTS: rank 0's steps done so far, to count the steps a restart redoes


def add_arguments(parser) -> None:
    """train.py's --snapshot-every flag."""
    parser.add_argument("--snapshot-every", type=positive_int, default=None, metavar="K",
                        help="write a snapshot every K steps into OUT/snapshots and resume from the newest complete one")


def restart_attempt() -> int:
    """torchrun's restarts of the workers so far (0 on the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


CONFIG = ("batch_size", "block_size", "lr", "n_layer", "n_head", "n_embd", "comm", "no_sync")  # train.py's, kept


class Snapshots:
    """train.py's snapshots (every --snapshot-every steps into OUT/snapshots) and its resume from the
    newest complete one; `record` says what happened, for run.json. Without the flag it does nothing."""

    def __init__(self, args: argparse.Namespace, world_size: int) -> None:
        every, faults = args.snapshot_every, args.fail_at
        self.root, self.every, self.steps = Path(args.out) / SNAPSHOTS, every, args.steps
        self.config = {k: vars(args)[k] for k in CONFIG} | {"world_size": world_size}  # a resume must match it
        self.attempt, self.rank = restart_attempt(), dist.get_rank()
        self.record = None
        if every or faults or self.attempt:
            self.record = {"attempt": self.attempt, "max_restarts": int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")),
                           "snapshot_every": every, "faults": faults}
        if self.attempt:
            print(f"[rank {self.rank}] attempt {self.attempt}: torchrun's agent restarted the workers "
                  f"(pid {os.getpid()})", flush=True)

    def resume(self, model, optimizer, shard) -> tuple[list[dict], int]:
        """Load the newest complete snapshot into the model, optimizer, data stream and RNGs; return the
        step records so far and the step to go on from ([] and 0 without one)."""
        if not self.every:
            return [], 0
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        previous = json.loads((self.root / PROGRESS).read_text()) if (self.root / PROGRESS).is_file() else None
        found = agree_on_snapshot(self.root)
        say = print if self.rank == 0 else (lambda *a, **k: None)
        for line in found.skipped:
            say(line, flush=True)
        self.record.update({"skipped": found.skipped, "resumed_from": relative(found.folder) if found.folder else None,
                            "resumed_from_step": found.step,
                            "previous_steps_done": previous["steps_done"] if previous else None,
                            "steps_redone": previous["steps_done"] - (found.step or 0) if previous else 0})
        if found.folder is None:
            if previous:
                say(f"no complete snapshot in {relative(self.root)}: starting again at step 0 "
                    f"({previous['steps_done']} steps redone)", flush=True)
            return [], 0
        state = load_rank_state(found.folder, self.rank)
        wrong = {k: (state["config"].get(k), v) for k, v in self.config.items() if state["config"].get(k) != v}
        if wrong or found.step > self.steps:
            what = (", ".join(f"{k} {old} (this run: {new})" for k, (old, new) in wrong.items()) if wrong
                    else f"step {found.step}, past --steps {self.steps}")
            if self.rank == 0:  # every rank stops; one line says why
                print(f"[rank {self.rank}] error: {relative(found.folder)} was taken with {what}: use another --out, "
                      f"or delete {relative(self.root)} to start afresh", file=sys.stderr, flush=True)
            sys.exit(2)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        shard.load_state_dict(state["data"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        redone = (f"the previous attempt had done {previous['steps_done']} steps: {self.record['steps_redone']} redone"
                  if previous else "no record of a previous attempt")
        say(f"resumed from {relative(found.folder)}: step {found.step} of {self.steps} "
            f"(attempt {self.attempt}; {redone})", flush=True)
        return state["records"], found.step

    def after_step(self, done: int, model, optimizer, shard, records: list[dict]) -> None:
        """After each step: rank 0 notes the steps done; every K steps (and at the end) every rank writes
        everything the next steps depend on: weights, AdamW's moments, its data position, the RNGs."""
        if not self.every:
            return
        if done % self.every == 0 or done == self.steps:
            state = {"step": done, "config": self.config, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "data": shard.state_dict(),
                     "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}, "records": records}
            folder = save_snapshot(self.root, done, state)
            if self.rank == 0:
                print(f"snapshot {relative(folder)}: step {done}, {dist.get_world_size()} ranks", flush=True)
        if self.rank == 0:
            write_json(self.root / PROGRESS, {"attempt": self.attempt, "steps_done": done})
