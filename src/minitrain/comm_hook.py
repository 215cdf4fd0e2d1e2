"""The lab's comm hook: DDP's own all-reduce (or another comm hook) with a stopwatch, each bucket from its
hook call to its future's completion. Variant B of minitrain.timing reads it, and so do the deeper measurements
(minitrain.rank); it lives apart from timing.py, where Block D is written, so that notebook 04's exercise
(variant B's hook, written by the learner) is not written out beside it.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
from torch.nn.parallel import DistributedDataParallel


@dataclass
class InstrumentedHook:
    """State of the lab's comm hook: DDP's all-reduce (or PyTorch's no-op hook, `comm="noop"`),
    noting each bucket's size and parameters, and when its all-reduce was launched and completed.
    `comm_hook`/`comm_state`: another comm hook to time instead (fp16_compress_hook, powerSGD_hook, ...)."""

    names: dict[int, str] = field(default_factory=dict)  # parameter data pointer -> name (optional)
    comm: str = "allreduce"
    step: int = 0  # advanced by end_step() only; events carry it
    buckets: dict[int, dict] = field(default_factory=dict)  # DDP rebuilds its buckets in step 1's forward: the latest
    events: list[dict] = field(default_factory=list)  # one per bucket all-reduce: step, bucket, ready, done
    comm_hook: Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]] = default_hooks.allreduce_hook
    comm_state: Any = None  # comm_hook's state: None for DDP's all-reduce (the default process group)

    def end_step(self) -> list[dict]:
        """The step's events (one per bucket all-reduce, none under no_sync() or the no-op hook);
        the next step begins. The one place the step counter advances."""
        events, self.events = self.events, []
        self.step += 1
        return events


def allreduce_ms(events: list[dict]) -> float | None:
    """A step's all-reduces, each from its hook call to its completion, summed (ms); None: none ran."""
    return sum(e["done"] - e["ready"] for e in events) * 1e3 if events else None


def instrumented_allreduce_hook(state: InstrumentedHook,
                                bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's own all-reduce hook (divide by world size, then sum), or `state.comm_hook`, with a
    stopwatch from the hook's call to its future's completion (compression included, if any).

    Times come from time.perf_counter(), the system-wide monotonic clock on Linux and macOS, so
    one rank's times compare with the other's: that is how the wire measurement sees who waited.
    """
    # DDP calls the hook once this bucket's gradients and every earlier bucket's are ready: it launches in order
    ready = time.perf_counter()
    if state.comm == "noop":
        return debugging_hooks.noop_hook(None, bucket)
    buffer = bucket.buffer()
    state.buckets[bucket.index()] = {
        "index": bucket.index(), "bytes": buffer.numel() * buffer.element_size(),
        "params": [state.names.get(p.data_ptr(), "?") for p in bucket.parameters()]}
    event = {"step": state.step, "bucket": bucket.index(), "ready": ready}
    state.events.append(event)

    def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        event["done"] = time.perf_counter()
        return fut.value()

    return state.comm_hook(state.comm_state, bucket).then(done)


def attach_instrumented_hook(ddp_model: DistributedDataParallel, comm: str = "allreduce",
                             comm_hook: Callable = default_hooks.allreduce_hook,
                             comm_state: Any = None) -> InstrumentedHook:
    """Register the instrumented hook on a DDP model (once: DDP allows one comm hook per model);
    `comm_hook` (with `comm_state`) replaces DDP's all-reduce inside it."""
    names = {p.data_ptr(): name for name, p in ddp_model.module.named_parameters()}  # a tied matrix once
    hook = InstrumentedHook(names=names, comm=comm, comm_hook=comm_hook, comm_state=comm_state)
    ddp_model.register_comm_hook(hook, instrumented_allreduce_hook)
    return hook
