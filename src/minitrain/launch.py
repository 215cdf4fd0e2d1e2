"""Start distributed runs from Python and notebooks: free loopback ports, torchrun as a child."""

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_workers(worker: Callable[..., None], nprocs: int, *args: object) -> None:
    """Run `worker(*args)` in `nprocs` processes with torchrun's environment, via mp.spawn.

    The lab sheet's fallback launcher: same process group, no torchrun agent in between.
    """
    if nprocs < 1:
        raise ValueError(f"--nproc must be at least 1, got {nprocs}")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nprocs))
    if nprocs > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun does, so runs compare
    mp.spawn(_spawned, args=(worker, args), nprocs=nprocs)


def _spawned(rank: int, worker: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    worker(*args)


class LaunchError(RuntimeError):
    """A launched run failed; the message holds its exit status and last lines of output."""


def torchrun_command(script: str | Path, nproc: int, *script_args: str) -> list[str]:
    """`torchrun --standalone --nproc-per-node=N script ...`, with this interpreter's torch."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", str(script), *script_args]


def run_streaming(command: list[str], timeout: float | None = None,
                  echo: Callable[[str], None] = print) -> int:
    """Run a command, echo each output line as it arrives, return 0 or raise LaunchError.

    The child gets its own process group: on a timeout or an interrupt (Ctrl-C, a notebook's
    stop button) the whole group (torchrun and every worker) is terminated, then killed.
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    tail: list[str] = []
    try:
        while (line := lines.get(timeout=_remaining(deadline))) is not None:
            echo(line)
            tail = (tail + [line])[-20:]
        status = proc.wait(timeout=_remaining(deadline))
    except (queue.Empty, subprocess.TimeoutExpired):
        stop_process_group(proc)
        raise TimeoutError(f"run did not finish within {timeout} s and was stopped: {' '.join(command)}")
    except BaseException:  # KeyboardInterrupt from a notebook's stop button included
        stop_process_group(proc)
        raise
    if status != 0:
        raise LaunchError(f"command exited with status {status}: {' '.join(command)}\n"
                          + "\n".join(tail))
    return status


def _pump(stream, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def stop_process_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is left after `grace` s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # workers can outlive torchrun for a moment
    except ProcessLookupError:
        pass
    proc.wait()
