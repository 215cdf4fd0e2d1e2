"""The lab's launcher, `python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun itself
(its elastic agent and failure reports), single node, every port on loopback."""

import os
import signal
import sys
import time
from pathlib import Path

import torch.distributed.run as torch_run
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from minitrain.ddp import WATCH_PID, exit_with_parent, loopback_interface
from minitrain.launch.rendezvous import LOOPBACK_RDZV, PortInUseError, register_loopback_rendezvous


def torchrun_command(script: str | Path, nproc: int, *script_args: str, module: bool = False) -> list[str]:
    """The lab's torchrun with `nproc` workers on this interpreter, every port on loopback (see
    `main`); with `module`, `script` is a module name, run as `python -m script` (torchrun's -m)."""
    return [sys.executable, "-m", "minitrain.launch", f"--nproc-per-node={nproc}",
            *(["-m"] if module else []), str(script), *script_args]


def main(argv: list[str] | None = None) -> None:
    """`python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun, single node, loopback only."""
    argv = sys.argv[1:] if argv is None else argv
    port = os.environ.get("MASTER_PORT", "0")  # 0: the store binds a free port itself, no race
    args = ["--nnodes=1", f"--rdzv-backend={LOOPBACK_RDZV}", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--local-addr=127.0.0.1", *argv]
    nproc = torch_run.parse_args(args).nproc_per_node
    if nproc.lstrip("-").isdigit() and int(nproc) < 1:
        sys.exit(f"error: --nproc-per-node must be at least 1, got {nproc}: use 1 or 2 for this lab")
    # started by run_streaming: if that process dies hard (a Jupyter kernel), stop this run too;
    # from a shell, Ctrl-C and a closed terminal already do, and a nohup'ed run keeps running
    exit_with_parent("the launcher", on_gone=_stop_workers, only_when_asked=True)
    os.environ[WATCH_PID] = str(os.getpid())  # and each worker stops if this launcher dies
    register_loopback_rendezvous()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    os.environ["MINITRAIN_LAUNCH_COMMAND"] = " ".join(["python -m minitrain.launch", *argv])
    try:
        torch_run.main(args)
    except PortInUseError as e:
        sys.exit(f"error: {e}")
    except ChildFailedError as e:
        sys.exit(f"error: the run failed, {describe_failures(e)}")


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
