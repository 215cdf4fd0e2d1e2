"""Start distributed runs from Python and notebooks: free loopback ports, torchrun as a child."""

import os
import socket
from collections.abc import Callable

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
