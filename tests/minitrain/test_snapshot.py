"""Snapshots on disk, without processes: a write is all or nothing, a snapshot counts only with its
COMPLETE marker and files that match it, the newest complete one wins and the rest are named; and
a shard's stream resumes at the same batch."""

import json
import random

import pytest
import torch

from minitrain.data import SEED_BASE, make_shard
from minitrain.snapshot import (KEEP, MARKER, check, load_rank_state, mark_complete, newest_complete,
                                save_rank_state, step_folder, write_durable)

WORLD = 2


def state_for(step: int, rank: int) -> dict:
    return {"step": step, "model": {"w": torch.full((4,), float(step + rank))},
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}}


def take(root, step: int, ranks: int = WORLD, complete: bool = True) -> None:
    """Every rank's file for `step`, then (if `complete`) the marker, as save_snapshot does in order."""
    files = [save_rank_state(root, step, rank, state_for(step, rank)) for rank in range(ranks)]
    if complete:
        mark_complete(root, step, files)


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_new_one(tmp_path):
    path = tmp_path / "rank-0.pt"
    write_durable(path, lambda tmp: torch.save({"v": 1}, tmp))

    def crash(tmp):
        tmp.write_bytes(b"half a fi")
        raise KeyboardInterrupt  # the process interrupted mid-write

    with pytest.raises(KeyboardInterrupt):
        write_durable(path, crash)
    assert torch.load(path, weights_only=True) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["rank-0.pt"]  # no temporary file left either


def test_the_newest_complete_snapshot_is_chosen_and_a_round_trip_is_exact(tmp_path):
    take(tmp_path, 4)
    take(tmp_path, 8)
    found = newest_complete(tmp_path, WORLD)
    assert (found.folder, found.step, found.skipped) == (step_folder(tmp_path, 8), 8, [])
    for rank in range(WORLD):
        loaded = load_rank_state(found.folder, rank)
        want = state_for(8, rank)
        assert torch.equal(loaded["model"]["w"], want["model"]["w"])
        assert torch.equal(loaded["rng"]["torch"], want["rng"]["torch"]) and loaded["rng"]["python"] == want["rng"]["python"]


def test_steps_sort_as_numbers(tmp_path):
    take(tmp_path, 9)
    take(tmp_path, 10)  # step-000010 after step-000009, unlike "10" < "9"
    assert newest_complete(tmp_path, WORLD).step == 10


@pytest.mark.parametrize("damage, reason", [
    ("no marker", "no COMPLETE marker: interrupted while it was written"),
    ("truncated", "rank-1.pt is {short} bytes, COMPLETE says {full} (truncated)"),
    ("changed", "rank-0.pt does not match its checksum in COMPLETE"),
    ("missing", "rank-1.pt is missing"),
    ("bad marker", "its COMPLETE marker is unreadable"),
])
def test_a_damaged_newest_snapshot_is_named_and_the_previous_one_used(tmp_path, damage, reason):
    take(tmp_path, 4)
    take(tmp_path, 8, complete=damage != "no marker")
    newest = step_folder(tmp_path, 8)
    full = (newest / "rank-1.pt").stat().st_size
    if damage == "truncated":
        (newest / "rank-1.pt").write_bytes((newest / "rank-1.pt").read_bytes()[:full // 2])
    elif damage == "changed":
        data = bytearray((newest / "rank-0.pt").read_bytes())
        data[-30] ^= 0xFF  # same size, other bytes
        (newest / "rank-0.pt").write_bytes(bytes(data))
    elif damage == "missing":
        (newest / "rank-1.pt").unlink()
    elif damage == "bad marker":
        (newest / MARKER).write_text('{"step": 8, "files": [')
    found = newest_complete(tmp_path, WORLD)
    assert found.folder == step_folder(tmp_path, 4)
    assert len(found.skipped) == 1
    assert "step-000008 skipped: " + reason.format(short=full // 2, full=full) in found.skipped[0]


def test_a_snapshot_of_another_world_size_is_skipped(tmp_path):
    take(tmp_path, 4, ranks=1)
    found = newest_complete(tmp_path, WORLD)
    assert found.folder is None and "taken by 1 ranks, this run has 2" in found.skipped[0]


def test_nothing_to_resume_from_in_an_empty_or_missing_folder(tmp_path):
    assert newest_complete(tmp_path, WORLD).folder is None
    assert newest_complete(tmp_path / "absent", WORLD).folder is None


def test_the_marker_is_written_last_and_records_every_file(tmp_path):
    take(tmp_path, 4, complete=False)
    assert check(step_folder(tmp_path, 4), WORLD) is not None  # the files alone are not a snapshot
    take(tmp_path, 4)
    marker = json.loads((step_folder(tmp_path, 4) / MARKER).read_text())
    assert marker["step"] == 4 and marker["world_size"] == WORLD
    assert [f["file"] for f in marker["files"]] == ["rank-0.pt", "rank-1.pt"]
    assert check(step_folder(tmp_path, 4), WORLD) is None


def test_older_snapshots_are_dropped_but_the_newest_complete_ones(tmp_path):
    take(tmp_path, 2, complete=False)  # an old incomplete one goes too
    for step in (4, 8, 12):
        take(tmp_path, step)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [f"step-{s:06d}" for s in (4, 8, 12)[-KEEP:]]


@pytest.mark.parametrize("drawn", [0, 1, 7, 400])  # 400 batches: several epochs of the small val shard
def test_a_shard_resumes_at_the_same_batch(corpus_dir, drawn):
    kw = dict(split="val", batch_size=8, block_size=32)
    original = make_shard(1, 2, corpus_dir, **kw)
    for _ in range(drawn):
        next(original)
    state = original.state_dict()
    assert state == {"seed": SEED_BASE + 1, "batches": drawn}  # rank 1's seed
    resumed = make_shard(1, 2, corpus_dir, **kw)
    next(resumed)  # whatever it drew before is forgotten: the position is the saved one
    resumed.load_state_dict(state)
    for _ in range(3):
        (xa, ya), (xb, yb) = next(original), next(resumed)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert resumed.state_dict() == original.state_dict()


def test_a_shard_refuses_a_position_taken_with_another_seed(corpus_dir):
    state = make_shard(0, 2, corpus_dir).state_dict()
    with pytest.raises(ValueError, match=f"taken with seed {SEED_BASE}, this shard has seed {SEED_BASE + 1}"):
        make_shard(1, 2, corpus_dir).load_state_dict(state)
