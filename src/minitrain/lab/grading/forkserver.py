"""A process that imports torch once, then forks one fresh child per graded TODO, of any tree.

Every TODO is graded in a process of its own (minitrain.lab.grading.gradebook's `--todo KEY REPO` mode), and a new
interpreter spends about 2 s of CPU importing torch and torch._dynamo before it grades anything: 14 TODOs, a
class of 30, about 14 minutes. The server here is started once per grading process (gradebook.shared_server); it
imports torch and pytest (nothing of minitrain: its PYTHONPATH is dropped) and forks a child per request. The child
starts a session of its own in the request's folder with the request's environment, puts its PYTHONPATH first on
sys.path as a new interpreter would (the graded tree's src), reseeds `random`, writes its output to a file, imports
the tree's minitrain (runpy, as `python -m`), and runs the module; the client stops its whole process tree at the
timeout. What the child shares with its siblings is what torch set up at import (its settings from the server's
environment then), and multiprocessing's own forkserver, started here once: the ranks a grader starts
(minitrain.launch.fast_start_method) fork from it, warm, instead of from one each child would start again (torch
imported anew: about 2 s of CPU a TODO); they get the child's environment and sys.path from it (spawn_workers,
multiprocessing's preparation data). This file runs as a script: it imports only the standard library and psutil.
"""

import importlib
import json
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import queue
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", "pytest")  # what every child imports
RANK_PRELOAD = ["torch", "torch._dynamo"]  # the ranks' forkserver's: minitrain.launch.spawn.fast_start_method's
START_TIMEOUT_S = 120  # the server's own start: torch's import, on a loaded machine


# ------------------------------------------------------------------------------------------------
# The server (this file run as a script): requests on stdin, one JSON object a line


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()  # nothing left in the buffer for a child to inherit


def _child(request: dict) -> None:
    """In the forked child: a session of its own in the request's folder and environment, its PYTHONPATH first on
    sys.path (as an interpreter started with it), output to the request's file, the module as __main__."""
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:0] = [os.path.abspath(p) for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    random.seed()  # as a new interpreter: not the server's state, shared by every child
    # the ranks' forkserver is the server's (serve): multiprocessing checks one is alive with waitpid, which only
    # its parent may call; it is alive as long as the server is
    multiprocessing.forkserver._forkserver.ensure_running = multiprocessing.resource_tracker.ensure_running
    from minitrain.as_main import run_as_main  # standard library only; the graded tree's (PYTHONPATH)
    os._exit(run_as_main(request["module"], request["args"], module=True))


def serve() -> None:
    """Preload, then fork a child for each request ({"id", "module", "args", "env", "cwd", "log"}); answer {"id", "pid"}
    at once and {"id", "exit"} when it ends. On end of input (the client is gone) the children are killed."""
    del sys.path[0]  # this file's folder: the children import the graded tree's minitrain, from their PYTHONPATH
    for name in PRELOAD:
        importlib.import_module(name)
    multiprocessing.set_forkserver_preload(RANK_PRELOAD)
    multiprocessing.forkserver.ensure_running()  # its children: the graders' ranks, warm
    _send({"ready": True})
    children: dict[int, int] = {}  # pid -> request id
    pending, open_input, killed = b"", True, False
    while open_input or children:
        if open_input and select.select([0], [], [], 0.05)[0]:
            data = os.read(0, 65536)
            open_input = bool(data)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request)
                children[pid] = request["id"]
                _send({"id": request["id"], "pid": pid})
        elif not open_input:
            if not killed:  # once: the client is gone, so are its children
                for pid in children:
                    _kill_tree(pid)
                killed = True
            time.sleep(0.05)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _send({"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


def _kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """`sig` to the child's session and to every descendant (torchrun starts workers in sessions of their own)."""
    try:
        tree = [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        tree = [pid]
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for member in tree:
        try:
            os.kill(member, sig)
        except ProcessLookupError:
            pass


# ------------------------------------------------------------------------------------------------
# The client


class Forkserver:
    """The server, started in this process's environment without its PYTHONPATH; `run` runs a module in a fresh
    child, in a folder and an environment of the caller's, streaming its output lines, and stops its whole tree at a
    timeout."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # each child gets its own
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
        self.replies: dict[int | None, queue.Queue] = {None: queue.Queue()}
        self.lock = threading.Lock()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        if (self._reply(None, START_TIMEOUT_S) or {}).get("ready") is not True:
            self.close()
            raise RuntimeError("the grading process server did not start")

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            if message.get("id") in self.replies:  # else a request this client did not make through run()
                self.replies[message.get("id")].put(message)
        for replies in list(self.replies.values()):
            replies.put({"exit": -1, "pid": None})  # the server ended: every child with it

    def _reply(self, request_id: int | None, timeout: float) -> dict | None:
        try:
            return self.replies[request_id].get(timeout=timeout)
        except queue.Empty:
            return None

    def run(self, module: str, args: list[str], timeout: float, echo: Callable[[str], None], env: dict[str, str],
            cwd: Path) -> int:
        """`python -m module args` in a fresh child, in `cwd` with the environment `env` (its PYTHONPATH first on
        sys.path); its exit status. TimeoutError once it has been stopped (SIGTERM to its tree, SIGKILL 5 s later)."""
        with self.lock:
            request_id, self.next_id = self.next_id, self.next_id + 1
            self.replies[request_id] = queue.Queue()
        with tempfile.TemporaryDirectory(prefix="minitrain-grade-log-") as tmp:
            log = Path(tmp) / "output.log"
            log.touch()
            with self.lock:  # one request a line, whichever thread writes it
                self.proc.stdin.write((json.dumps({"id": request_id, "module": module, "args": args, "env": env,
                                                   "cwd": str(cwd), "log": str(log)}) + "\n").encode())
                self.proc.stdin.flush()
            started = self._reply(request_id, START_TIMEOUT_S)
            if started is None or started["pid"] is None:
                raise RuntimeError("the grading process server did not answer")
            with open(log, "rb") as output:
                done = self._follow(request_id, output, time.monotonic() + timeout, echo)
                if done is None:
                    _kill_tree(started["pid"], signal.SIGTERM)
                    done = self._follow(request_id, output, time.monotonic() + 5, echo)
                    if done is None:
                        _kill_tree(started["pid"])
                        self._follow(request_id, output, time.monotonic() + 30, echo)
                    raise TimeoutError(f"{module} {' '.join(args)}: no result within {timeout:g} s; stopped")
        return done["exit"]

    def _follow(self, request_id: int, output, deadline: float, echo: Callable[[str], None]) -> dict | None:
        """Echo the child's new lines until it ends (its exit message) or `deadline` passes (None)."""
        pending = b""
        while True:
            message = self._reply(request_id, 0.1)
            pending += output.read()
            *lines, pending = pending.split(b"\n")
            for line in lines:
                echo(line.decode(errors="replace"))
            if message is not None or time.monotonic() > deadline:
                if pending and message is not None:
                    echo(pending.decode(errors="replace"))
                return message

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the server: it kills what is left of its children when its input closes."""
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve()
