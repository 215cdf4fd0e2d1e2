"""Faults a learner's laptop produces, tried with real processes: ports, dead or stuck workers,
interrupted cells, clean exits, and what the run listens on."""

import hashlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from jupyter_client.manager import start_new_kernel

from conftest import HERE, TRAIN, WORKERS, launch, wait_for_line, wait_gone
from minitrain.launch import (free_port, listening_sockets, process_tree, run_streaming,
                              torchrun_command)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, float]:
    """Exit status, remaining output and seconds until the run exited."""
    start = time.monotonic()
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out, time.monotonic() - start


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_two_runs_at_once_each_get_a_free_port(reap):
    runs = [launch("--nproc-per-node=2", str(WORKERS), "clean") for _ in range(2)]
    for r in runs:
        reap(r)
    for r in runs:
        status, out, _ = finish(r)
        assert status == 0, out
        assert out.count("done, sum [2.0, 2.0, 2.0, 2.0]") == 2


def test_a_taken_master_port_fails_fast_and_names_the_port(reap):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = launch("--nproc-per-node=2", str(WORKERS), "clean", env={"MASTER_PORT": str(port)})
        reap(proc)
        status, out, seconds = finish(proc, timeout=30)
    assert status != 0
    assert f"port {port} on 127.0.0.1 is already in use" in out
    assert "Unset MASTER_PORT" in out
    assert seconds < 15


def test_a_killed_worker_ends_the_run_and_keeps_the_previous_artifacts(tmp_path, corpus_dir, reap):
    out_dir = tmp_path / "run"
    args = ["--nproc-per-node=2", str(TRAIN), "--out", str(out_dir), "--corpus-dir", str(corpus_dir)]
    previous = launch(*args, "--steps", "4", "--warmup", "2")
    reap(previous)
    assert finish(previous)[0] == 0
    before = digest(out_dir)
    assert {"timings.jsonl", "run.json", "state-rank-0.pt", "state-rank-1.pt"} <= before.keys()

    proc = launch(*args, "--steps", "2000", "--warmup", "2")
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


def test_four_runs_exit_cleanly_two_at_a_time(reap):
    """An abort at exit ("terminate called without an active exception") is a race: repeat the
    runs, two at a time so that the races meet a busy machine too (every other launch in the suite
    checks a clean exit as well)."""
    for attempt in range(2):
        procs = [launch("--nproc-per-node=2", str(WORKERS), "clean") for _ in range(2)]
        for proc in procs:
            reap(proc)
        for proc in procs:
            status, out, _ = finish(proc)
            assert status == 0, f"pair {attempt}: exit {status}\n{out}"
            assert "terminate called" not in out


def test_a_module_runs_under_the_launcher_with_dash_m(monkeypatch):
    """torchrun_command(..., module=True): the workers run `python -m workers`, no script path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    command = torchrun_command("workers", 2, "clean", module=True)
    assert command[3:6] == ["--nproc-per-node=2", "-m", "workers"]
    lines: list[str] = []
    assert run_streaming(command, timeout=120, echo=lines.append) == 0
    out = "\n".join(lines)  # two workers' lines may interleave on one line
    assert out.count("done, sum [2.0, 2.0, 2.0, 2.0]") == 2, out


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_every_listening_socket_of_a_run_is_on_loopback(tmp_path, corpus_dir, reap, launcher):
    if launcher == "torchrun":
        proc = launch("--nproc-per-node=2", str(WORKERS), "serve", "8")
    else:
        proc = subprocess.Popen(
            [sys.executable, str(TRAIN), "--launcher", "spawn", "--nproc", "2", "--steps", "300",
             "--warmup", "2", "--out", str(tmp_path), "--corpus-dir", str(corpus_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reap(proc)
    wait_for_line(proc, "ready" if launcher == "torchrun" else "step    2 ")
    listeners = listening_sockets(process_tree(proc.pid))
    # the rendezvous store and one gloo listener per worker, at least: the check is not vacuous
    assert len(listeners) >= 3, listeners
    assert [l for l in listeners if not l.is_loopback] == []
    proc.kill() if launcher == "spawn" else finish(proc)


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
    pytest.fail(f"kernel never printed {needle!r}: {''.join(seen)[-2000:]}")
