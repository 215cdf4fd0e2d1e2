"""Faults a learner's laptop produces, tried with real processes: ports, clean exits, and what the run
listens on (runs stopped before their time: test_stopped_runs.py)."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from harness import HERE, NEW_INTERPRETERS, TRAIN, WORKERS, launch, wait_for_line
from minitrain.launch import listening_sockets, process_tree, run_ranks, torchrun_command
from minitrain.launch.warm import WARM


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, float]:
    """Exit status, remaining output and seconds until the run exited."""
    start = time.monotonic()
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out, time.monotonic() - start


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


def test_runs_two_at_a_time_each_get_a_free_port_and_exit_cleanly(reap):
    """Two runs at once each find a free port and exit cleanly (no "terminate called without an active
    exception": every other launch in the suite checks a clean exit as well). The second run is a module
    under the launcher: torchrun_command(..., module=True), whose workers run `python -m workers`."""
    command = torchrun_command("workers", 2, "clean", module=True)
    assert command[:6] == [sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2", "-m", "workers"]
    path = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    env = {**path, **NEW_INTERPRETERS}  # an abort at exit is a new interpreter's finalization
    procs = [launch("--nproc-per-node=2", str(WORKERS), "clean", env=env), launch(*command[3:], env=env)]
    for proc in procs:
        reap(proc)
    for run, proc in zip(("script", "module"), procs):
        status, out, _ = finish(proc)
        assert status == 0, f"the {run} run: exit {status}\n{out}"
        assert out.count("done, sum [2.0, 2.0, 2.0, 2.0]") == 2, out  # lines may interleave, not be lost
        assert "terminate called" not in out


def test_the_lab_runs_start_the_lab_torchrun_with_its_options_unless_the_tests_ask_for_warm_ranks(monkeypatch):
    """launch.run_ranks as `make lab` and `make measurements` run it ($MINITRAIN_WARM_RANKS unset): the lab's
    torchrun, its options in their place (the workers see torchrun's --max-restarts), every line streamed."""
    monkeypatch.delenv(WARM, raising=False)
    lines: list[str] = []
    assert run_ranks(WORKERS, 2, "clean", options=("--max-restarts=1",), timeout=120, echo=lines.append) == 0
    out = "\n".join(lines)
    assert out.count("max restarts 1") == 2 and out.count("done, sum [2.0, 2.0, 2.0, 2.0]") == 2, out


def test_a_worker_forked_by_the_launcher_starts_as_a_new_interpreter_would(reap):
    """Under the tests the lab's torchrun forks each worker from itself, warm ($MINITRAIN_WARM_RANKS=1); its script
    sees what it sees in a new interpreter, as a learner's run starts it: argv, __name__, sys.path[0], torch's
    threads, the signal handlers, the death signal and the fault handler, torchrun's variables, a session of its own,
    the launcher watched, its listening sockets (its gloo's only, not the launcher's)."""
    seen = {}
    for how, env in (("forked", {}), ("new", NEW_INTERPRETERS)):
        proc = launch("--nproc-per-node=2", str(WORKERS), "start", env=env)
        reap(proc)
        status, out, _ = finish(proc)
        assert status == 0, out
        seen[how] = sorted((json.loads(m) for m in re.findall(r"^rank \d started with (.*)$", out, re.MULTILINE)),
                           key=lambda start: start["env"]["RANK"])
    assert [start.pop("forked") for start in seen["forked"]] == [sys.platform == "linux"] * 2  # (_torchrun)
    assert [start.pop("forked") for start in seen["new"]] == [False, False]
    assert len(seen["new"]) == 2 and seen["forked"] == seen["new"], seen


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_every_listening_socket_of_a_run_is_on_loopback(tmp_path, corpus_dir, reap, launcher):
    hold = tmp_path / "go"
    if launcher == "torchrun":
        proc = launch("--nproc-per-node=2", str(WORKERS), "hold", str(hold))
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
    hold.touch()  # the torchrun run's workers end now
    proc.kill() if launcher == "spawn" else finish(proc)


