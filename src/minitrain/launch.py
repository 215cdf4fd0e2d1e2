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
import torch.distributed as dist
import torch.distributed.run as torchrun
import torch.multiprocessing as mp
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from minitrain.ddp import loopback_interface
from minitrain.processes import alive, process_tree


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_workers(worker: Callable[..., None], nprocs: int, *args: object) -> None:
    """Run `worker(*args)` in `nprocs` processes with torchrun's environment, via mp.spawn.

    The lab sheet's fallback launcher. The parent hosts the rendezvous store on 127.0.0.1, as
    torchrun's agent does, and every worker connects to it as a client.
    """
    if nprocs < 1:
        raise ValueError(f"--nproc must be at least 1, got {nprocs}")
    store = loopback_store(int(os.environ.get("MASTER_PORT", "0")), wait_for_workers=False)
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), WORLD_SIZE=str(nprocs),
               LOCAL_WORLD_SIZE=str(nprocs), TORCHELASTIC_USE_AGENT_STORE="True")
    if nprocs > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"  # what torchrun does, so runs compare
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the children inherit it; the caller gets its own back afterwards
    try:
        mp.spawn(_spawned, args=(worker, args), nprocs=nprocs)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def _spawned(rank: int, worker: Callable[..., None], args: tuple) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    worker(*args)


class LaunchError(RuntimeError):
    """A launched run failed; the message holds its exit status and last lines of output."""


def torchrun_command(script: str | Path, nproc: int, *script_args: str) -> list[str]:
    """torchrun with `nproc` workers on this interpreter, every port on loopback (see `main`)."""
    return [sys.executable, "-m", "minitrain.launch", f"--nproc-per-node={nproc}", str(script),
            *script_args]


def run_streaming(command: list[str], timeout: float | None = None,
                  echo: Callable[[str], None] = print) -> int:
    """Run a command, echo each output line as it arrives, return 0 or raise LaunchError.

    On a timeout or an interrupt (Ctrl-C, a notebook's stop button) the child's whole process
    tree (torchrun and every worker) is terminated, then killed: no worker outlives the cell.
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
        stop_process_tree(proc)
        raise TimeoutError(f"run did not finish within {timeout} s and was stopped: {' '.join(command)}")
    except BaseException:  # KeyboardInterrupt from a notebook's stop button included
        stop_process_tree(proc)
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
    for pid in alive(tree) + ([proc.pid] if proc.poll() is None else []):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


# torchrun's own stores listen on every interface, whatever --master-addr or --rdzv-endpoint says
# (pytorch/pytorch#173909). The lab's launcher is torchrun itself, with a rendezvous backend whose
# stores listen on 127.0.0.1 only: a socket we bind ourselves, handed over with master_listen_fd.
LOOPBACK_RDZV = "loopback"


class PortInUseError(RuntimeError):
    """The port asked for on 127.0.0.1 is taken."""


def loopback_store(port: int = 0, **kwargs) -> dist.TCPStore:
    """A TCPStore server listening on 127.0.0.1:`port` (0: a free port) and nowhere else."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        sock.close()
        raise PortInUseError(
            f"port {port} on 127.0.0.1 is already in use ({e.strerror}): another run may hold it. "
            "Unset MASTER_PORT to let the lab pick a free port, or choose another one.") from e
    sock.listen(128)
    port = sock.getsockname()[1]
    return dist.TCPStore("127.0.0.1", port, is_master=True, master_listen_fd=sock.detach(), **kwargs)


class LoopbackRendezvousHandler(DynamicRendezvousHandler):
    """torch's dynamic rendezvous, whose shared store for the workers listens on loopback only."""

    def _create_tcp_store_server(self, master_addr: str, master_port: int) -> dist.TCPStore:
        return loopback_store(master_port, multi_tenant=True)

    def get_backend(self) -> str:
        return LOOPBACK_RDZV


def _create_loopback_handler(params: RendezvousParameters) -> LoopbackRendezvousHandler:
    _, port = parse_rendezvous_endpoint(params.endpoint, default_port=0)
    store = loopback_store(port, multi_tenant=True)
    backend = C10dRendezvousBackend(store, params.run_id)
    return LoopbackRendezvousHandler.from_backend(params.run_id, store, backend, params.min_nodes,
                                                  params.max_nodes, local_addr="127.0.0.1")


def main(argv: list[str] | None = None) -> None:
    """`python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun, single node, loopback only."""
    argv = sys.argv[1:] if argv is None else argv
    port = os.environ.get("MASTER_PORT", "0")  # 0: the store binds a free port itself, no race
    args = ["--nnodes=1", f"--rdzv-backend={LOOPBACK_RDZV}", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--local-addr=127.0.0.1", *argv]
    nproc = torchrun.parse_args(args).nproc_per_node
    if nproc.lstrip("-").isdigit() and int(nproc) < 1:
        sys.exit(f"error: --nproc-per-node must be at least 1, got {nproc}: use 1 or 2 for this lab")
    rendezvous_handler_registry.register(LOOPBACK_RDZV, _create_loopback_handler)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    os.environ["MINITRAIN_LAUNCH_COMMAND"] = " ".join(["python -m minitrain.launch", *argv])
    try:
        torchrun.main(args)
    except PortInUseError as e:
        sys.exit(f"error: {e}")
    except ChildFailedError as e:
        sys.exit(f"error: the run failed, {describe_failures(e)}")


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


if __name__ == "__main__":
    main()
