"""Runs that end before their time, with real processes: a worker killed or stuck, a cell's timeout, an
interrupted notebook kernel. Each ends the whole run, leaves no process behind and nothing half-written."""

import hashlib
import os
import queue
import re
import signal
import socket
import time

import pytest
from jupyter_client.manager import start_new_kernel

from harness import NEW_INTERPRETERS, TRAIN, WORKERS, launch, wait_for_line, wait_gone
from minitrain.launch import free_port, process_tree, run_streaming, torchrun_command

PREVIOUS_RUN = ["timings.jsonl", "run.json", "state-rank-0.pt", "state-rank-1.pt"]


def finish(proc, timeout: float = 60) -> tuple[int, str, float]:
    """Exit status, remaining output and seconds until the run exited."""
    start = time.monotonic()
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out, time.monotonic() - start


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_killed_worker_ends_the_run_and_keeps_the_previous_artifacts(tmp_path, corpus_dir, reap):
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    for name in PREVIOUS_RUN:  # a previous run's files in the folder
        (out_dir / name).write_text(f"the previous run's {name}\n")
    before = digest(out_dir)
    proc = launch("--nproc-per-node=2", str(TRAIN), "--out", str(out_dir), "--corpus-dir", str(corpus_dir),
                  "--steps", "2000", "--warmup", "2", env=NEW_INTERPRETERS)
    reap(proc)
    lines = wait_for_line(proc, "step    5 ")
    tree = process_tree(proc.pid)
    assert len(tree) >= 3  # the launcher and both workers
    rank1_pid = int(re.search(r"\[rank 1\] pid (\d+)", "".join(lines)).group(1))
    os.kill(rank1_pid, signal.SIGKILL)
    status, out, seconds = finish(proc, timeout=60)
    print(f"killed worker: the run exited {seconds:.1f} s after SIGKILL")
    assert status != 0
    assert seconds < 30
    assert f"rank 1 (pid {rank1_pid}) was killed by SIGKILL" in out
    assert wait_gone(tree) == []
    assert digest(out_dir) == before  # nothing half-written, nothing lost


def test_a_stuck_worker_is_ended_by_the_collective_timeout(reap):
    proc = launch("--nproc-per-node=2", str(WORKERS), "hang", env={"MINITRAIN_COLLECTIVE_TIMEOUT": "5"})
    reap(proc)
    wait_for_line(proc, "ready")
    tree = process_tree(proc.pid)
    status, out, seconds = finish(proc, timeout=90)
    print(f"stuck worker: the run exited {seconds:.1f} s after both ranks were ready")
    assert status != 0
    assert "timed out" in out.lower() or "timeout" in out.lower(), out
    assert "rank 0" in out
    assert seconds < 45
    assert wait_gone(tree) == []


def test_a_cell_timeout_stops_the_whole_run(tmp_path):
    marker = str(tmp_path / "timeout-run")
    with pytest.raises(TimeoutError, match="did not finish within 8"):
        run_streaming(torchrun_command(WORKERS, 2, "serve", "120", marker), timeout=8, echo=lambda _: None)
    time.sleep(1)
    assert [p for p in _pids_with(marker)] == []


def test_interrupting_the_notebook_kernel_stops_the_run_and_frees_the_port(tmp_path):
    marker, port = str(tmp_path / "interrupted-run"), free_port()
    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ, "MASTER_PORT": str(port)})
    try:
        code = ("from minitrain.launch import run_streaming, torchrun_command\n"
                f"run_streaming(torchrun_command({str(WORKERS)!r}, 2, 'serve', '120', {marker!r}))")
        kc.execute(code)
        _wait_for_output(kc, "ready", timeout=60)
        assert len(_pids_with(marker)) >= 3  # the launcher and both workers
        km.interrupt_kernel()
        _wait_for_output(kc, "KeyboardInterrupt", timeout=30)
        deadline = time.monotonic() + 15
        while _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _pids_with(marker) == []
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # the rendezvous port is free again
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _pids_with(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def _wait_for_output(kc, needle: str, timeout: float) -> None:
    """Read the kernel's iopub messages until some output holds `needle`."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        content = msg["content"]
        text = content.get("text", "") + content.get("ename", "") + "".join(content.get("traceback", []))
        seen.append(text)
        if needle in text:
            return
        if content.get("ename"):  # the cell raised (a run that failed, a blank TODO): the needle will not come
            break
    pytest.fail(f"kernel never printed {needle!r}: {''.join(seen)[-2000:]}")
