"""Streaming a run into a notebook cell or a terminal, and stopping its whole process tree on a
timeout or an interrupt."""

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from minitrain.cli import BAD_USAGE
from minitrain.parent_watch import WATCH_PID
from minitrain.launch.processes import alive, process_tree


# a one-line error of the lab's: "error: ...", "train.py: error: ...", "[rank 1] error: ..."
ONE_LINE_ERROR = re.compile(r"^(?:\S+: |\[rank \d+\] )?error: ")


class LaunchError(RuntimeError):
    """A launched run failed; the message holds its exit status and last lines of output, or, when
    it rejected an argument, input or setting (exit status 2), its one line saying what is wrong."""


def run_streaming(command: list[str], timeout: float | None = None,
                  echo: Callable[[str], None] = print, env: dict[str, str] | None = None) -> int:
    """Run a command, echo each output line as it arrives, return 0 or raise LaunchError.

    On a timeout or an interrupt (Ctrl-C, a notebook's stop button) the child's whole process
    tree (torchrun and every worker) is terminated, then killed: no worker outlives the cell. If
    this process itself dies hard (a kernel killed), the lab's launcher notices and stops the run.
    `env`: variables set for the child on top of this process's environment.
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True,
                            env={**os.environ, **(env or {}), WATCH_PID: str(os.getpid())})
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
        stop_process_tree(proc)
        raise TimeoutError(f"run did not finish within {timeout} s and was stopped: {' '.join(command)}")
    except BaseException:  # KeyboardInterrupt from a notebook's stop button included
        stop_process_tree(proc)
        raise
    errors = [line for line in tail if ONE_LINE_ERROR.match(line)]
    if status == BAD_USAGE and errors:
        raise LaunchError(errors[0])  # the first says what is wrong; the launcher's own one follows it
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


def stop_process_tree(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the child's process group (torchrun passes it on to its workers), then SIGKILL
    every process of its tree still alive after `grace` seconds: no worker outlives the cell."""
    tree = process_tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what ignores SIGTERM (multiprocessing's resource tracker)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in alive(tree) + ([proc.pid] if proc.poll() is None else []):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
