"""One DDP rank of the lab's training, as the deeper measurements run it: seed, model, shard, wrap
(bucket cap and comm hook as arguments, or another wrapper such as notebook 15's levels), the instrumented
comm hook, AdamW, and a timed step.

experiments/35-ddp-cpu/train.py writes the same setup out line by line (the sheet's Block C);
this class is that setup once, for every measurement that trains.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.autograd.profiler import record_function
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from minitrain.data import SEED_BASE, make_shard
from minitrain.ddp import wrap_for_ddp
from minitrain.timing import StepTimer, allreduce_ms, attach_instrumented_hook, timed_backward
from minitrain.train import TrainConfig, build_model_for_corpus, seed_everything


@dataclass(frozen=True)
class StepRecord:
    """One training step of one rank: its loss and times (ms), and its comm-hook events."""

    loss: float
    step_ms: float
    forward_ms: float
    backward_ms: float  # the all-reduces DDP launches inside backward included
    optimizer_ms: float
    events: list[dict] = field(default_factory=list)  # one per bucket all-reduce: step, bucket, ready, done
    finish_ms: float | None = None  # the wrapper's finish() after backward (notebook 15's levels); None: no finish()

    @property
    def allreduce_ms(self) -> float | None:
        """The step's all-reduces summed, hook call to completion (None: none ran)."""
        return allreduce_ms(self.events)

    @property
    def after_last_ready_ms(self) -> float | None:
        """From the last bucket's hook call to the last all-reduce done: what backward did not hide."""
        if not self.events:
            return None
        return (max(e["done"] for e in self.events) - max(e["ready"] for e in self.events)) * 1e3


class DDPRank:
    """The lab's MiniGPT on one rank of an initialised process group: seeded with seed_base + rank,
    its shard, DDP (`bucket_cap_mb`), the instrumented hook (`comm`, `comm_hook`, `comm_state`), AdamW.
    `instrumented=False`: DDP's built-in all-reduce with no Python comm hook (`hook` is None).
    `wrap`: another wrapper instead of wrap_for_ddp (bucket_cap_mb unused; instrumented=False unless it
    returns torch's DDP); one with a finish() (notebook 15's levels) has it called after backward."""

    def __init__(self, rank: int, world_size: int, corpus_dir: Path, *, seed_base: int = SEED_BASE,
                 bucket_cap_mb: float | None = None, wrap: Callable[[nn.Module], nn.Module] | None = None,
                 comm: str = "allreduce", comm_hook: Callable = default_hooks.allreduce_hook, comm_state: Any = None,
                 instrumented: bool = True, config: TrainConfig = TrainConfig()) -> None:
        seed_everything(seed_base + rank)  # as train.py; DDP broadcasts rank 0's weights anyway
        self.model, _ = build_model_for_corpus(corpus_dir, config.block_size)
        self.shard = make_shard(rank, world_size, corpus_dir, batch_size=config.batch_size,
                                block_size=config.block_size, seed=seed_base + rank)
        self.tokens_per_step = config.batch_size * config.block_size * world_size
        self.ddp = wrap(self.model) if wrap else wrap_for_ddp(self.model, bucket_cap_mb=bucket_cap_mb)
        self.hook = (attach_instrumented_hook(self.ddp, comm=comm, comm_hook=comm_hook, comm_state=comm_state)
                     if instrumented else None)
        self.optimizer = torch.optim.AdamW(self.ddp.parameters(), lr=config.lr)

    def step(self, timers: list[StepTimer] = ()) -> StepRecord:
        """One training step (no barriers unless a timer adds them); `timers` bracket backward, the
        wrapper's finish() (if any) follows it."""
        t0 = time.perf_counter()
        loss = self.ddp(next(self.shard)).loss
        t1 = time.perf_counter()
        with record_function("backward"):  # a named slice in a profiler trace; costs nothing unprofiled
            timed_backward(loss, list(timers))
        t2 = time.perf_counter()
        finishes = hasattr(self.ddp, "finish")  # notebook 15's levels: the gradients are averaged once it returns
        if finishes:
            self.ddp.finish()
        t3 = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        events = self.hook.end_step() if self.hook else []
        return StepRecord(loss.item(), (t4 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3, events,
                          (t3 - t2) * 1e3 if finishes else None)

    def steps(self, count: int) -> list[StepRecord]:
        """`count` training steps, in turn."""
        return [self.step() for _ in range(count)]


def rebuilt_buckets(ddp_model: DistributedDataParallel) -> tuple[list[int], list[int]]:
    """DDP's own record of its buckets after the rebuild at step 1: each bucket's bytes, and the
    parameter indices in bucket order (DDP logs them as text: "148608, 148992")."""
    data = ddp_model._get_ddp_logging_data()
    numbers = lambda key: [int(n) for n in re.findall(r"\d+", str(data.get(key, "")))]  # noqa: E731
    return numbers("rebuilt_bucket_sizes"), numbers("rebuilt_per_bucket_param_indices")
