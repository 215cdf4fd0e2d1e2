"""The lab sheet's fallback launcher, and the one for Windows: torch.multiprocessing.spawn with
torchrun's environment, its rendezvous store hosted by the parent on 127.0.0.1, without libuv on
Windows (whose wheels lack it: pytorch/pytorch#139990); with fast_start_method(), a warm forkserver for the
graders' and tests' short runs."""

import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing import reduction
from pathlib import Path

import torch
import torch.multiprocessing as mp

from minitrain.cli import master_port
from minitrain.gloo_setup import collective_timeout, use_libuv
from minitrain.parent_watch import WATCH_PID, exit_with_parent
from minitrain.launch.rendezvous import loopback_store


def fast_start_method() -> str:
    """"forkserver" where the platform has one (not Windows), its server importing torch and what
    DistributedDataParallel() imports (torch._dynamo) once: about 2 s of CPU less per worker than a
    fresh interpreter. For short runs (the graders', the tests'); "spawn" elsewhere."""
    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    mp.get_context("forkserver").set_forkserver_preload(["torch", "torch._dynamo"])
    return "forkserver"


def start_processes(fn: Callable[..., None], nprocs: int, args: tuple = (), start_method: str = "spawn",
                    timeout_s: float | None = None, env: dict[str, str] | None = None,
                    outputs: list[int] | None = None, grace_s: float | None = None,
                    stop: threading.Event | None = None) -> None:
    """torch's mp.start_processes: `fn(rank, *args)` in `nprocs` processes, each with the caller's
    environment as it is now and `env` on top (a forkserver's children would get the server's, from when it
    started; passed, not set in os.environ, so that threads may start runs side by side), writing to the caller's
    stdout and stderr, or each rank both to its own file descriptor of `outputs`. Once one fails, the others get
    SIGTERM at once, or after `grace_s` if still running (torchrun's agent notices within 0.1 s).
    Processes still running after `timeout_s`, or once `stop` is set, are killed and TimeoutError raised: a hang no
    collective timeout ends (one after the last collective) stops there, not at a test runner's limit."""
    environ = {**os.environ, **(env or {})}
    per_rank = [_Output((fd, fd)) for fd in outputs] if outputs else [_Output()]
    context = mp.start_processes(_in_environ, args=(fn, args, environ, per_rank), nprocs=nprocs,
                                 start_method=start_method, join=False)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not context.join(timeout=1.0, grace_period=grace_s):  # raises as soon as one process fails
        stopped = stop is not None and stop.is_set()
        if stopped or (deadline is not None and time.monotonic() > deadline):
            alive = [p.pid for p in context.processes if p.is_alive()]
            for process in context.processes:
                process.kill()
                process.join()
            raise TimeoutError(f"{len(alive)} of {nprocs} processes still running "
                               f"{'when stopped' if stopped else f'after {timeout_s:g} s'} "
                               f"(pids {', '.join(map(str, alive))}): killed")


class _Output:
    """The caller's stdout and stderr (file descriptors 1 and 2), sent to each process it starts: a forkserver's
    child would write to the server's, which may be another caller's (a test's captured output, a grading server's
    replies: minitrain.lab.grading.forkserver)."""

    def __init__(self, fds: tuple = (1, 2)) -> None:
        self.fds = fds

    def __reduce__(self) -> tuple:  # pickled for the child: each descriptor passed with it (spawn, forkserver)
        if sys.platform == "win32":  # no descriptors to pass there: a spawned child inherits the std handles
            return _Output, ((),)
        return _Output, (tuple(reduction.DupFd(fd) for fd in self.fds),)

    def attach(self) -> None:
        """In the child: make them its own 1 and 2."""
        fds = [fd if isinstance(fd, int) else fd.detach() for fd in self.fds]  # an int: forked, nothing was passed
        for target, fd in zip((1, 2), fds):
            if fd != target:
                os.dup2(fd, target)
        for fd in set(fds) - {1, 2}:
            os.close(fd)

    def close(self) -> None:
        """In the child: another rank's, closed (its reader sees the end when that rank ends)."""
        for fd in self.fds:
            if not isinstance(fd, int):
                os.close(fd.detach())


def _in_environ(rank: int, fn: Callable[..., None], args: tuple, environ: dict[str, str],
                outputs: list[_Output]) -> None:
    mine = outputs[rank % len(outputs)]
    mine.attach()
    for other in outputs:
        if other is not mine:
            other.close()
    os.environ.clear()
    os.environ.update(environ)
    fn(rank, *args)


def spawn_workers(worker: Callable[..., None], nprocs: int, *args: object, start_method: str = "spawn",
                  timeout_s: float | None = None, env: dict[str, str] | None = None,
                  outputs: list[int] | None = None, grace_s: float | None = None,
                  stop: threading.Event | None = None) -> None:
    """Run `worker(*args)` in `nprocs` processes with torchrun's environment, via mp.spawn (or
    `start_method`, e.g. fast_start_method()).

    The parent hosts the rendezvous store on 127.0.0.1, as torchrun's agent does, and every
    worker connects to it as a client. With libuv off (Windows; USE_LIBUV=0 elsewhere) the store
    and its clients use torch's other TCPStore backend, and the workers get USE_LIBUV=0 too. A bad
    MASTER_PORT or MINITRAIN_COLLECTIVE_TIMEOUT raises minitrain.cli.SettingError before any start;
    workers still running after `timeout_s` are killed (TimeoutError, see start_processes). `env`: variables
    for the workers on top of this process's; `outputs`: each rank's file descriptor for its stdout and stderr
    (start_processes); `grace_s`: how long the others may run on once one failed; `stop`: set, every worker is killed
    (start_processes).
    """
    if nprocs < 1:
        raise ValueError(f"--nproc must be at least 1, got {nprocs}")
    collective_timeout()  # a bad value fails here, not in every worker
    store = loopback_store(master_port(), wait_for_workers=False)
    env = {**(env or {}), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": str(nprocs),
           "LOCAL_WORLD_SIZE": str(nprocs), "TORCHELASTIC_USE_AGENT_STORE": "True",
           WATCH_PID: str(os.getpid())}  # each worker stops if this process dies
    if not use_libuv():
        env["USE_LIBUV"] = "0"  # init_distributed then makes its client store without libuv
    if nprocs > 1 and "OMP_NUM_THREADS" not in {**os.environ, **env}:
        env["OMP_NUM_THREADS"] = "1"  # what torchrun does, so runs compare
    start_processes(_spawned, nprocs, (worker, args), start_method, timeout_s, env, outputs, grace_s, stop)


def _spawned(rank: int, worker: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    exit_with_parent(f"rank {rank}")  # the caller killed, this rank ends: its parent may be a forkserver that lives on
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    worker(*args)


def ranks_json(worker: Callable[..., None], nprocs: int, *args: object, timeout_s: float = 300) -> list:
    """spawn_workers(worker, nprocs, folder, *args) on warm ranks (fast_start_method) in a new temporary folder, where
    each rank writes rank-R.json: what they wrote, rank 0's first."""
    with tempfile.TemporaryDirectory(prefix="minitrain-ranks-") as folder:
        spawn_workers(worker, nprocs, folder, *args, start_method=fast_start_method(), timeout_s=timeout_s)
        return [json.loads((Path(folder) / f"rank-{r}.json").read_text()) for r in range(nprocs)]
