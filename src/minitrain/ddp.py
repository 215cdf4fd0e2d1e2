"""Block A: a thin wrapper over torch.distributed for the lab (gloo, CPU): join the process group,
wrap the model in DDP, gate on rank 0, wait for every rank, leave. Each docstring states what notebook
03's grader (graders.grade_block_a) checks: without a process group, and in a real 2-process run."""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from minitrain.gloo_setup import prepare_rank


def init_distributed(backend: str = "gloo", timeout: timedelta | None = None) -> tuple[int, int]:
    """Join the process group that torchrun's environment variables describe (env://, the default: no address of
    its own), with prepare_rank's `options` passed on to dist.init_process_group (the lab's timeout); return
    (rank, world_size), two ints, the rank in the whole group (not LOCAL_RANK: the grader runs as on two hosts of
    one rank each). Calling it again in the same process joins nothing new (the same group) and returns the same
    pair."""
    if backend != "gloo":
        raise ValueError(f"this lab runs on CPUs with the gloo backend only, got {backend!r}")
    options = prepare_rank(timeout)  # init_process_group's keyword arguments, a dict: the timeout (Windows: the store)
    ### BEGIN SOLUTION: Block A: init_distributed
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, **options)
    return dist.get_rank(), dist.get_world_size()
    ### END SOLUTION


def wrap_for_ddp(model: torch.nn.Module, bucket_cap_mb: float | None = None) -> TorchDDP:
    """Return `model` wrapped in DistributedDataParallel with PyTorch's defaults (no device_ids on CPUs, no
    find_unused_parameters, gradient_as_bucket_view or static_graph; broadcast_buffers and forward_sync_buffers
    left unset: None, which syncs buffers). bucket_cap_mb None: DDP's own caps (1 MiB for the first bucket, 25 MiB after: pass
    the None on); a number sets every cap, in MiB. Without a process group raise RuntimeError, its message
    naming init_distributed()."""
    ### BEGIN SOLUTION: Block A: wrap_for_ddp
    if not dist.is_initialized():
        raise RuntimeError("wrap_for_ddp() needs a process group: call init_distributed() first")
    return TorchDDP(model, bucket_cap_mb=bucket_cap_mb)  # broadcasts rank 0's parameters and buffers
    ### END SOLUTION


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside a DDP wrapper (state-dict keys without the `module.` prefix)."""
    return model.module if isinstance(model, TorchDDP) else model


def is_main_process() -> bool:
    """True on rank 0 only (False on the others; rank 0 of the whole group, not each host's LOCAL_RANK 0), and
    True in a plain single process with no process group, where dist.get_rank() would raise: it gates logging
    and files."""
    ### BEGIN SOLUTION: Block A: is_main_process
    return not dist.is_initialized() or dist.get_rank() == 0
    ### END SOLUTION


def barrier() -> None:
    """Wait until every rank of the group gets here; a no-op without a process group."""
    ### BEGIN SOLUTION: Block A: barrier
    if dist.is_initialized():
        dist.barrier()
    ### END SOLUTION


def cleanup() -> None:
    """Leave the process group at the end of training: wait for every rank first (a rank that leaves while a
    peer is mid-collective can make the peer fail: a race, seen here now and then as an abort at exit), then destroy
    the group (dist.is_initialized() is False after it). A no-op without a process group, so safe to call twice."""
    ### BEGIN SOLUTION: Block A: cleanup
    if dist.is_initialized():
        dist.barrier()  # leaving while the peer is mid-collective can make it fail (a race)
        dist.destroy_process_group()
    ### END SOLUTION
