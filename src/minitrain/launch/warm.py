"""A script or module on warm ranks: run_streaming's counterpart for notebook 16's broken runs, and for the lab's
runs under the tests ($MINITRAIN_WARM_RANKS: run_ranks). Each rank is forked from a server that has imported torch
(fast_start_method) and runs the script as `python [-m]` would (minitrain.as_main), with the variables of torchrun's
that the lab's scripts read (spawn_workers); its output lines reach `echo` as they arrive, as torchrun's would. A rank's start costs a fork instead of about 2 s of CPU importing
torch and torch._dynamo; the lab's torchrun itself is tested end to end apart (tests/faults, its workers forked from
the launcher: torchrun._torchrun)."""

import contextlib
import faulthandler
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch.distributed as dist
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from minitrain.as_main import run_as_main
from minitrain.parent_watch import WATCH_PID
from minitrain.launch.spawn import fast_start_method, spawn_workers
from minitrain.launch.stream import LaunchError, run_streaming, stop_process_tree
from minitrain.launch.torchrun import LAUNCH_COMMAND, WARM, torchrun_command

WARM_JOB = "warm ranks:"  # how a WarmJob's thread is named
GRACE_S = 1.0  # once a rank failed, the others may end on their own (their errors, their dumps) before SIGTERM,
# and SIGKILL as long again after it; torchrun's agent notices a failure within 0.1 s (--monitor-interval)
_quiet = {"runs": 0, "lock": threading.Lock()}  # runs under way: torch's spawn log goes to them, not to stderr


def run_ranks(script: str | Path, nproc: int, *script_args: str, module: bool = False, options: tuple[str, ...] = (),
              env: dict[str, str] | None = None, timeout: float | None = None,
              echo: Callable[[str], None] = print) -> int:
    """The lab's runs (the experiment, the control runs, the measurements' workers, the restart measurement's runs
    without a fault): SCRIPT on `nproc` ranks under the lab's torchrun with its `options` (`--max-restarts=1`),
    streamed to `echo` (run_streaming); with $MINITRAIN_WARM_RANKS=1, on warm ranks (run_warm) that record the command
    the lab's torchrun would have recorded, options included, but do not act on them (no restart)."""
    command = torchrun_command(script, nproc, *script_args, module=module)
    command[4:4] = options  # torchrun's own, after --nproc-per-node
    if os.environ.get(WARM) != "1":
        return run_streaming(command, timeout, echo, env)
    recorded = " ".join(["python -m minitrain.launch", *command[3:]])  # as minitrain.launch's main sets it
    return run_warm(script, nproc, *script_args, module=module, env={**(env or {}), LAUNCH_COMMAND: recorded},
                    timeout=timeout, echo=echo)


def start_ranks(script: str | Path, nproc: int, *script_args: str, module: bool = False, log: Path) -> "Job":
    """run_ranks started, not waited for, its lines to the file `log`: a Popen of the lab's torchrun (the worker stops
    if this process dies), or with $MINITRAIN_WARM_RANKS=1 a WarmJob. Both have poll, wait and returncode; stop_ranks
    ends either with its ranks."""
    if os.environ.get(WARM) == "1":
        return WarmJob(script, nproc, *script_args, module=module, log=log)
    with open(log, "w") as output:  # the child holds its own copy
        return subprocess.Popen(torchrun_command(script, nproc, *script_args, module=module), stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, WATCH_PID: str(os.getpid())})


def stop_ranks(job: "Job") -> None:
    """A job of start_ranks ended, its ranks with it."""
    if isinstance(job, WarmJob):
        job.stop()
    else:
        stop_process_tree(job)


class WarmJob:
    """run_warm in a thread of this process, its lines to a file: what a Popen gives (poll, wait, returncode)."""

    def __init__(self, script: str | Path, nproc: int, *script_args: str, module: bool, log: Path) -> None:
        self.returncode: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(script, nproc, script_args, module, log), daemon=True,
                                        name=f"{WARM_JOB} {script}")
        self._thread.start()

    def _run(self, script: str | Path, nproc: int, script_args: tuple[str, ...], module: bool, log: Path) -> None:
        code = 1
        with open(log, "w") as output:
            def echo(line: str) -> None:
                output.write(line + "\n")
                output.flush()
            try:
                code = run_warm(script, nproc, *script_args, module=module, echo=echo, stop=self._stop)
            except (LaunchError, TimeoutError):
                pass  # its lines are in the log
            except Exception as e:  # the lab's own code failed: said in the log, which the caller shows
                echo(f"error: {type(e).__name__}: {e}")
        self.returncode = code

    def poll(self) -> int | None:
        return None if self._thread.is_alive() else self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(f"warm ranks of {self._thread.name}", timeout or 0)
        return self.returncode if self.returncode is not None else 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


Job = subprocess.Popen | WarmJob


def run_warm(script: str | Path, nproc: int, *script_args: str, module: bool = False,
             env: dict[str, str] | None = None, timeout: float | None = None,
             echo: Callable[[str], None] = print, stop: threading.Event | None = None) -> int:
    """`python [-m] SCRIPT ARGS` on `nproc` warm ranks, each output line echoed as it arrives; 0, or LaunchError
    after echoing the launcher's line (`error: the run failed, rank 1 (pid 42) was killed by SIGABRT`) when a rank
    fails (the error: that line, which names the first rank that failed only, and the last lines of output);
    TimeoutError (every rank killed) at `timeout` or once `stop` is set. `env`: variables for the ranks on top of
    this process's."""
    if sys.platform == "win32":  # no descriptors to pass to a spawned rank there: its output would be lost
        raise RuntimeError("warm ranks read their output through pipes Windows cannot pass on: run this in WSL")
    tail: list[str] = []

    def seen(line: str) -> None:
        tail[:] = (tail + [line])[-20:]
        echo(line)

    pipes = [os.pipe() for _ in range(nproc)]  # a pipe per rank: two ranks' lines never mix
    readers = [threading.Thread(target=_pump, args=(read, seen), daemon=True) for read, _ in pipes]
    for reader in readers:
        reader.start()
    failure = None
    try:
        with _logged_to(echo):
            spawn_workers(_warm_rank, nproc, str(script), list(script_args), module,
                          start_method=fast_start_method(), timeout_s=timeout, env=env,
                          outputs=[write for _, write in pipes], grace_s=GRACE_S, stop=stop)
    except ProcessExitedException as e:
        how = f"was killed by {e.signal_name}" if e.signal_name else f"exited with status {e.exit_code}"
        failure = f"error: the run failed, rank {e.error_index} (pid {e.error_pid}) {how}"
    except ProcessRaisedException as e:  # before the script ran: the lab's own code in the rank (spawn.py) raised
        raised = e.msg.strip().splitlines()[-1]
        failure = f"error: the run failed, rank {e.error_index} (pid {e.error_pid}) raised: {raised}"
    finally:
        for (_, write), reader in zip(pipes, readers):
            os.close(write)  # the rank's copy closed as it ended: its reader reaches the end of its output
            reader.join(timeout=10)
    if failure:
        echo(failure)
        raise LaunchError("\n".join([failure, *tail]))
    return 0


@contextlib.contextmanager
def _logged_to(echo: Callable[[str], None]) -> Iterator[None]:
    """torch's "Terminating process N via signal SIGTERM" (the other ranks stopped when one fails) to `echo`, with
    the ranks' lines, as torchrun's agent's lines are, not to this process's stderr (a notebook cell's): each run's
    records are those of its thread (torch logs from the thread that joins the ranks)."""
    logger, handler, thread = logging.getLogger("torch.multiprocessing.spawn"), logging.Handler(), threading.get_ident()
    handler.emit = lambda record: echo(record.getMessage()) if record.thread == thread else None  # type: ignore
    logger.addHandler(handler)
    with _quiet["lock"]:
        _quiet["runs"] += 1
        logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        with _quiet["lock"]:
            _quiet["runs"] -= 1
            logger.propagate = _quiet["runs"] == 0


def _pump(fd: int, echo: Callable[[str], None]) -> None:
    with open(fd, "rb") as output:
        for line in output:
            echo(line.decode(errors="replace").rstrip("\n"))


def _warm_rank(script: str, args: list[str], module: bool) -> None:
    """One rank: SCRIPT as `python [-m] SCRIPT ARGS` runs it. TORCH_DISTRIBUTED_DEBUG and PYTHONFAULTHANDLER, read at
    the server's start, are read again here; other settings read at import are the server's."""
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    dist.set_debug_level_from_env()  # TORCH_DISTRIBUTED_DEBUG
    os._exit(run_as_main(script, args, module))  # no finalization, and multiprocessing's own clean-up skipped
