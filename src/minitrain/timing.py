"""Timing a DDP step: where the all-reduce happens and what it costs.

Variant A (the lab sheet's): `dist.barrier()` before and after `loss.backward()`. The bracketed
time holds the backward pass, the all-reduce that overlaps it, and any wait for the slower rank.
Variant B: a DDP comm hook that times each bucket's all-reduce itself, from launch to completion.
"""

import math
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


@dataclass
class AllreduceTimer:
    """State of the timing comm hook: per-bucket all-reduce times of the current step."""

    process_group: dist.ProcessGroup | None = None
    seconds: list[float] = field(default_factory=list)
    bucket_bytes: dict[int, int] = field(default_factory=dict)

    def pop_step(self) -> float:
        """Total all-reduce seconds since the last call (one step), and reset."""
        total, self.seconds = sum(self.seconds), []
        return total


def timed_allreduce_hook(timer: AllreduceTimer,
                         bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own all-reduce hook (divide by world size, sum), with a stopwatch around it."""
    start = time.perf_counter()
    buffer = bucket.buffer()
    timer.bucket_bytes[bucket.index()] = buffer.numel() * buffer.element_size()

    def stop(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        timer.seconds.append(time.perf_counter() - start)
        return fut.value()

    return default_hooks.allreduce_hook(timer.process_group, bucket).then(stop)


def attach_allreduce_timer(ddp_model: torch.nn.parallel.DistributedDataParallel) -> AllreduceTimer:
    """Register the timing hook on a DDP model (once: DDP allows one comm hook per model)."""
    timer = AllreduceTimer()
    ddp_model.register_comm_hook(timer, timed_allreduce_hook)
    return timer


def timed_backward(loss: torch.Tensor) -> float:
    """Variant A: seconds between a barrier before `loss.backward()` and one after it."""
    if dist.is_initialized():
        dist.barrier()
    start = time.perf_counter()
    loss.backward()
    if dist.is_initialized():
        dist.barrier()  # DDP has waited for its all-reduces before backward returns; this waits for the peer
    return time.perf_counter() - start


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, median and p95 (nearest-rank) of a list of measurements."""
    ordered = sorted(values)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
    return {"mean": statistics.fmean(ordered), "median": statistics.median(ordered), "p95": p95}
