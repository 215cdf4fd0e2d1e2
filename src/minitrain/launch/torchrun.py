"""The lab's launcher, `python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun itself
(its elastic agent and failure reports), single node, every port on loopback; not on Windows, where
torchrun's rendezvous asks for libuv, which PyTorch's Windows wheels lack (the spawn launcher works
there: `train.py --launcher spawn`)."""

import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch.distributed.run as torch_run
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from minitrain.cli import BAD_USAGE, SettingError, check_environment, master_port
from minitrain.ddp import WATCH_PID, exit_with_parent, loopback_interface, on_windows
from minitrain.launch.rendezvous import LOOPBACK_RDZV, PortInUseError, register_loopback_rendezvous

USAGE = "python -m minitrain.launch --nproc-per-node=N SCRIPT [SCRIPT ARGS ...]"
ON_WINDOWS = ("torchrun does not run with PyTorch's Windows wheels: its rendezvous asks for libuv, which they "
              "lack (pytorch/pytorch#139990, #175316). Use the spawn launcher, which runs with libuv off: "
              "python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2 (or run the lab in WSL)")
REJECTED = "the script rejected its arguments or input (see the line above)"


class TorchrunUnavailable(RuntimeError):
    """torchrun cannot run on this operating system (Windows); the message names the way that works."""


def preferred_launcher(platform: str | None = None) -> str:
    """The launcher for this OS (or `platform`, as in sys.platform): "torchrun" (the lab's own,
    `python -m minitrain.launch`) on Linux and macOS, "spawn" (`train.py --launcher spawn`) on Windows."""
    return "spawn" if (platform or sys.platform) == "win32" else "torchrun"


def torchrun_command(script: str | Path, nproc: int, *script_args: str, module: bool = False) -> list[str]:
    """The lab's torchrun with `nproc` workers on this interpreter, every port on loopback (see
    `main`); with `module`, `script` is a module name, run as `python -m script` (torchrun's -m).
    On Windows it raises TorchrunUnavailable, whose message names the spawn launcher."""
    if preferred_launcher() != "torchrun":
        raise TorchrunUnavailable(ON_WINDOWS)
    return [sys.executable, "-m", "minitrain.launch", f"--nproc-per-node={nproc}",
            *(["-m"] if module else []), str(script), *script_args]


def main(argv: list[str] | None = None) -> None:
    """`python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun, single node, loopback only.

    A bad option, SCRIPT or setting ends at once in one line with exit status 2, as does a run whose
    workers all stopped with status 2 (the script rejected its arguments and said so in one line)."""
    argv = sys.argv[1:] if argv is None else argv
    if on_windows():
        _usage_error(ON_WINDOWS)
    try:
        check_environment()
    except SettingError as e:
        _usage_error(str(e))
    args = ["--nnodes=1", f"--rdzv-backend={LOOPBACK_RDZV}", f"--rdzv-endpoint=127.0.0.1:{master_port()}",
            "--local-addr=127.0.0.1", *argv]  # port 0: the store binds a free port itself, no race
    _check_arguments(args)
    # started by run_streaming: if that process dies hard (a Jupyter kernel), stop this run too;
    # from a shell, Ctrl-C and a closed terminal already do, and a nohup'ed run keeps running
    exit_with_parent("the launcher", on_gone=_stop_workers, only_when_asked=True)
    os.environ[WATCH_PID] = str(os.getpid())  # and each worker stops if this launcher dies
    register_loopback_rendezvous()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    os.environ["MINITRAIN_LAUNCH_COMMAND"] = " ".join(["python -m minitrain.launch", *argv])
    quiet = _QuietWhenRejected(logging.getLogger("torch.distributed.elastic.multiprocessing.api"))
    try:
        torch_run.main(args)
    except PortInUseError as e:
        sys.exit(f"error: {e}")
    except ChildFailedError as e:
        if rejected(e):
            quiet.drop()
            print(f"error: {REJECTED}", file=sys.stderr, flush=True)
            sys.exit(BAD_USAGE)
        quiet.release()
        sys.exit(f"error: the run failed, {describe_failures(e)}")
    finally:
        quiet.release()


def _usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(BAD_USAGE)


def _check_arguments(args: list[str]) -> None:
    """torchrun's own parser, its errors in one line; then --nproc-per-node and SCRIPT."""
    parser = torch_run.get_args_parser()
    parser.error = lambda message: _usage_error(  # type: ignore[method-assign]
        f"no SCRIPT to run: {USAGE}" if "training_script" in message else f"{message} (usage: {USAGE})")
    parsed = parser.parse_args(args)
    nproc = parsed.nproc_per_node
    if not ((nproc.isdigit() and int(nproc) >= 1) or nproc in ("cpu", "auto")):
        _usage_error(f"--nproc-per-node={nproc} is not a whole number of at least 1: use 1 or 2 for this lab")
    script = parsed.training_script
    if not (parsed.module or parsed.no_python) and not Path(script).is_file():
        _usage_error(f"SCRIPT {script} is not a file: give the path of a Python script, e.g. "
                     "experiments/35-ddp-cpu/train.py (or -m MODULE for a module)")


def rejected(error: ChildFailedError) -> bool:
    """True when the first worker to fail exited with status 2, the lab's status for a bad argument
    or input it has reported in one line, and every other failed worker did the same or was stopped
    by torchrun's SIGTERM."""
    _, first = error.get_first_failure()
    return first.exitcode == BAD_USAGE and all(
        f.exitcode in (BAD_USAGE, -signal.SIGTERM) for f in error.failures.values())


class _QuietWhenRejected(logging.Filter):
    """Holds back torchrun's "Sending process N closing signal SIGTERM" lines until it is known why
    the workers are being stopped; after a first failure with status 2 those lines and "failed
    (exitcode: 2)" are dropped (the script has said what is wrong), otherwise logged as they were."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger, self.held = logger, []
        logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_minitrain_released", False):
            return True
        if isinstance(record.msg, str) and record.msg.startswith("Sending process") and "closing signal" in record.msg:
            self.held.append(record)
            return False
        if isinstance(record.msg, str) and record.msg.startswith("failed (exitcode") and record.args \
                and record.args[0] == BAD_USAGE:
            self.drop()
            return False
        self.release()
        return True

    def drop(self) -> None:
        self.held = []

    def release(self) -> None:
        held, self.held = self.held, []
        for record in held:
            record._minitrain_released = True
            self.logger.handle(record)


def _stop_workers() -> None:
    """SIGTERM to this launcher: torchrun's own handler stops every worker, then exits; should it
    take more than 5 s, exit_with_parent's os._exit follows (the workers then stop on their own)."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)


def describe_failures(error: ChildFailedError) -> str:
    """Which ranks failed and how, first failure first: 'rank 1 (pid 42) was killed by SIGKILL'."""
    first_rank, _ = error.get_first_failure()
    ranks = [first_rank] + sorted(r for r in error.failures if r != first_rank)
    parts = []
    for rank in ranks:
        failure = error.failures[rank]
        how = (f"was killed by {signal.Signals(-failure.exitcode).name}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode}")
        parts.append(f"rank {rank} (pid {failure.pid}) {how}")
    return "; ".join(parts) + " (first failure first; the worker's own message is above)"
