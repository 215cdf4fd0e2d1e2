"""Block A: a thin wrapper over torch.distributed for the lab (gloo, CPU): join the process group,
wrap the model in DDP, gate on rank 0, wait for every rank, leave."""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from minitrain.gloo_setup import prepare_rank


def init_distributed(backend: str = "gloo", timeout: timedelta | None = None) -> tuple[int, int]:
    """Join the process group that torchrun's environment variables describe; return (rank, world_size).
    Calling it again in the same process joins nothing new."""
    if backend != "gloo":
        raise ValueError(f"this lab runs on CPUs with the gloo backend only, got {backend!r}")
    options = prepare_rank(timeout)  # init_process_group's other arguments: the timeout (Windows: the store)
    ### BEGIN SOLUTION: Block A: init_distributed
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, **options)
    return dist.get_rank(), dist.get_world_size()
    ### END SOLUTION


def wrap_for_ddp(model: torch.nn.Module, bucket_cap_mb: float | None = None) -> TorchDDP:
    """Wrap `model` in DDP with PyTorch's defaults (None: DDP's own bucket caps, 1 MiB for the first
    bucket and 25 MiB after; a number sets every cap, in MiB). Needs init_distributed() first."""
    ### BEGIN SOLUTION: Block A: wrap_for_ddp
    if not dist.is_initialized():
        raise RuntimeError("wrap_for_ddp() needs a process group: call init_distributed() first")
    return TorchDDP(model, bucket_cap_mb=bucket_cap_mb)  # broadcasts rank 0's parameters and buffers
    ### END SOLUTION


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside a DDP wrapper (state-dict keys without the `module.` prefix)."""
    return model.module if isinstance(model, TorchDDP) else model


def is_main_process() -> bool:
    """True on rank 0, and in a plain single process with no process group: it gates logging and files."""
    ### BEGIN SOLUTION: Block A: is_main_process
    return not dist.is_initialized() or dist.get_rank() == 0
    ### END SOLUTION


def barrier() -> None:
    """Wait until every rank gets here; a no-op without a process group."""
    ### BEGIN SOLUTION: Block A: barrier
    if dist.is_initialized():
        dist.barrier()
    ### END SOLUTION


def cleanup() -> None:
    """Leave the process group at the end of training; safe to call twice, and without a group."""
    ### BEGIN SOLUTION: Block A: cleanup
    if dist.is_initialized():
        dist.barrier()  # a rank that left while its peer is mid-collective makes the peer abort at exit
        dist.destroy_process_group()
    ### END SOLUTION
