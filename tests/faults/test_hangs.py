"""A hang names itself, with real processes (tests/faults/hangs.py, a tiny DDP step with one mistake): each
kind ends within seconds of a short collective timeout, every waiting rank printing the line where it waits
and the collective; no process is left. Most run from spawn_workers' forkserver (torch imported once);
one goes through the lab's torchrun."""

import re
import time

import pytest
import torch.multiprocessing as mp

import hangs
from harness import HERE, launch, wait_gone
from minitrain.hang_report import HANG_STATUS, MISMATCH, named_hang, named_mismatch
from minitrain.launch import fast_start_method, spawn_workers

TIMEOUT_S = 3  # MINITRAIN_COLLECTIVE_TIMEOUT for these runs
SOURCE = (HERE / "hangs.py").read_text().splitlines()


def line(kind: str) -> str:
    """`hangs.py:N`, N the line marked `# waits: KIND`."""
    [number] = [i for i, text in enumerate(SOURCE, 1) if f"# waits: {kind}" in text]
    return f"hangs.py:{number}"


def run(kind: str, tmp_path, monkeypatch) -> tuple[Exception | None, dict[int, str], float]:
    """spawn_workers(hangs.main, 2, kind): what it raised, each rank's output, seconds from the later
    rank's "ready" to the end of the run."""
    monkeypatch.setenv("MINITRAIN_COLLECTIVE_TIMEOUT", str(TIMEOUT_S))
    error = None
    try:
        spawn_workers(hangs.main, 2, kind, str(tmp_path), start_method=fast_start_method())
    except mp.ProcessExitedException as e:
        error = e
    ended = time.monotonic()
    logs = {rank: (tmp_path / f"rank-{rank}.log").read_text() for rank in (0, 1)}
    ready = max(float(re.search(r"ready, pid \d+, at ([\d.]+)", log)[1]) for log in logs.values())
    pids = [int(re.search(r"ready, pid (\d+)", log)[1]) for log in logs.values()]
    assert wait_gone(pids) == []
    return error, logs, ended - ready


@pytest.mark.parametrize("kind, waits", [
    ("barrier-on-one-rank", {0: ("barrier-on-one-rank", "barrier"), 1: ("no-backward", "backward")}),
    ("skipped-collective", {0: ("skipped-collective", "all_reduce"), 1: ("cleanup", "barrier")}),
    ("no-backward", {0: ("no-backward", "backward"), 1: ("cleanup", "barrier")}),
])
def test_a_hang_names_each_waiting_rank_its_line_and_collective(kind, waits, tmp_path, monkeypatch):
    error, logs, seconds = run(kind, tmp_path, monkeypatch)
    assert error is not None and error.exit_code == HANG_STATUS, error
    for rank, (marker, collective) in waits.items():
        assert named_hang(logs[rank]) is not None, logs[rank]
        assert named_hang(logs[rank]).startswith(f"hangs at {line(marker)} on rank {rank} (waits in {collective}")
    assert seconds < TIMEOUT_S + 10, seconds


def test_mismatched_shapes_abort_at_once_naming_the_mismatch_and_the_line(tmp_path, monkeypatch):
    """gloo sees the sizes differ and aborts the receiving rank (no hang, no Python exception): its terminate
    handler's line names the rank, the line and the collective, gloo's own message follows."""
    error, logs, seconds = run("mismatched-shapes", tmp_path, monkeypatch)
    assert error is not None and error.signal_name == "SIGABRT", error
    rank = error.error_index
    crashed = logs[rank]
    assert named_mismatch(crashed) == f"all_reduce {MISMATCH} at {line('mismatched-shapes')} on rank {rank}", crashed
    assert crashed.index("Is there a distributed collective mismatch in your code?") > crashed.index(f"[rank {rank}] ")
    assert seconds < TIMEOUT_S, seconds


def test_a_missing_cleanup_exits_cleanly(tmp_path, monkeypatch):
    """torch 2.13 leaves a process group not destroyed without a word at exit: nothing to report."""
    error, logs, _ = run("no-cleanup", tmp_path, monkeypatch)
    assert error is None
    for rank, log in logs.items():
        assert f"rank {rank} ends without cleanup()" in log and "hangs at" not in log, log


def test_under_torchrun_each_rank_names_its_line_and_the_run_ends(reap):
    proc = launch("--nproc-per-node=2", str(HERE / "hangs.py"), "no-backward",
                  env={"MINITRAIN_COLLECTIVE_TIMEOUT": str(TIMEOUT_S)})
    reap(proc)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert f"[rank 0] hangs at {line('no-backward')} in main: waits in backward" in out, out
    assert f"[rank 1] hangs at {line('cleanup')} in main (via ddp.py:" in out, out
    assert f"exited with status {HANG_STATUS}" in out, out
    pids = [int(pid) for pid in re.findall(r"ready, pid (\d+)", out)]
    assert len(pids) == 2 and wait_gone(pids) == []


def test_a_hang_no_collective_timeout_ends_is_killed_at_the_run_limit():
    """A rank stuck outside any collective (here: asleep) outlives every collective timeout; spawn_workers'
    timeout_s kills the run and says so, and leaves no process."""
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"2 of 2 processes still running after 3 s \(pids (\d+), (\d+)\): killed") as e:
        spawn_workers(time.sleep, 2, 3600, start_method=fast_start_method(), timeout_s=3)
    assert time.monotonic() - start < 60
    assert wait_gone([int(pid) for pid in re.findall(r"\d+", str(e.value).split("pids ")[1])]) == []
