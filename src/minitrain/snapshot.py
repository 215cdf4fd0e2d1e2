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

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.artifacts import write_atomic
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
