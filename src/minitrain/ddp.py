"""A thin wrapper over torch.distributed for the lab: init, wrap, rank-0 gate, barrier, cleanup."""

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as TorchDDP

# A lost peer must end the run in seconds, not after the 30-minute default.
COLLECTIVE_TIMEOUT = timedelta(seconds=float(os.environ.get("MINITRAIN_COLLECTIVE_TIMEOUT", "60")))
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def loopback_interface() -> str:
    """Name of the loopback network interface ("lo" on Linux, "lo0" on macOS)."""
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def init_distributed(backend: str = "gloo", timeout: timedelta = COLLECTIVE_TIMEOUT) -> tuple[int, int]:
    """Join the process group described by torchrun's environment; return (rank, world_size)."""
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_distributed() needs the variables torchrun sets, missing: {', '.join(missing)}. "
            "Launch the script with `torchrun --standalone --nproc-per-node=2 SCRIPT` "
            "(or `python -m torch.distributed.run ...`)."
        )
    if backend != "gloo":
        raise ValueError(f"this lab runs on CPUs with the gloo backend only, got {backend!r}")
    # gloo talks over the interface its hostname resolves to; keep it on loopback
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def wrap_for_ddp(model: torch.nn.Module) -> TorchDDP:
    """Wrap with PyTorch DDP defaults; DDP broadcasts rank 0's parameters to every rank here."""
    if not dist.is_initialized():
        raise RuntimeError("wrap_for_ddp() needs a process group: call init_distributed() first")
    return TorchDDP(model)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside a DDP wrapper (state-dict keys without the `module.` prefix)."""
    return model.module if isinstance(model, TorchDDP) else model


def is_main_process() -> bool:
    """True on rank 0, and in a plain single process with no process group."""
    return not dist.is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if dist.is_initialized():
        dist.barrier()


def cleanup() -> None:
    """Destroy the process group; safe to call twice.

    The barrier matters: a rank that destroys the group while its peer is still mid-collective
    makes the peer abort at exit ("terminate called without an active exception").
    """
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
