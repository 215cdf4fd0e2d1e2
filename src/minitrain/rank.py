"""One DDP rank of the lab's training, as the deeper measurements and make lab's repeats run it: Block C's
`setup` and `train_step` from experiments/35-ddp-cpu/train.py (the learner's own, in the student edition:
the lab keeps no copy of them), with the wrapper (bucket cap, or notebook 15's levels), the seed and the
instrumented comm hook as arguments.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from minitrain.data import SEED_BASE
from minitrain.ddp import wrap_for_ddp
from minitrain.script import run_setup, run_step, train_script
from minitrain.comm_hook import allreduce_ms, attach_instrumented_hook
from minitrain.timing import StepTimer
from minitrain.train import TrainConfig


@dataclass(frozen=True)
class StepRecord:
    """One training step of one rank: its loss and times (ms), and its comm-hook events."""

    loss: float
    step_ms: float
    forward_ms: float
    backward_ms: float  # the all-reduces DDP launches inside backward included (and a wrapper's finish())
    optimizer_ms: float
    events: list[dict] = field(default_factory=list)  # one per bucket all-reduce: step, bucket, ready, done
    finish_ms: float | None = None  # the wrapper's finish() after backward (notebook 15's levels, inside backward_ms)

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


class Finish:
    """A StepTimer that calls a wrapper's finish() (notebook 15's levels) right after loss.backward(), timed:
    the gradients are averaged once it returns."""

    def __init__(self, wrapper: nn.Module) -> None:
        self.wrapper, self.ms = wrapper, None

    def before_backward(self) -> None:
        pass

    def after_backward(self) -> None:
        start = time.perf_counter()
        self.wrapper.finish()
        self.ms = (time.perf_counter() - start) * 1e3

    def pop_ms(self) -> float | None:
        ms, self.ms = self.ms, None
        return ms


class DDPRank:
    """The lab's MiniGPT on one rank of an initialised process group, built by train.py's `setup`: seeded with
    seed_base + rank, its shard, DDP (`bucket_cap_mb`), AdamW; then the instrumented hook (`comm`, `comm_hook`,
    `comm_state`). `instrumented=False`: DDP's built-in all-reduce with no Python comm hook (`hook` is None).
    `wrap`: another wrapper instead of wrap_for_ddp (bucket_cap_mb unused; instrumented=False unless it
    returns torch's DDP); one with a finish() (notebook 15's levels) has it called right after backward."""

    def __init__(self, rank: int, world_size: int, corpus_dir: Path, *, seed_base: int = SEED_BASE,
                 bucket_cap_mb: float | None = None, wrap: Callable[[nn.Module], nn.Module] | None = None,
                 comm: str = "allreduce", comm_hook: Callable = default_hooks.allreduce_hook, comm_state: Any = None,
                 instrumented: bool = True, config: TrainConfig = TrainConfig()) -> None:
        self.train = train_script()
        args = self.train.parse_args(["--corpus-dir", str(corpus_dir), "--seed", str(seed_base), "--batch-size",
                                      str(config.batch_size), "--block-size", str(config.block_size), "--lr",
                                      str(config.lr)])
        joined = run_setup(self.train.setup, args, wrap or partial(wrap_for_ddp, bucket_cap_mb=bucket_cap_mb))
        if joined[:2] != (rank, world_size):
            raise RuntimeError(f"train.py's setup() returned rank {joined[0]} of {joined[1]}, not {rank} of {world_size}")
        self.ddp, self.shard, self.optimizer = joined[2:]
        self.model = self.ddp.module  # the plain model inside the wrapper
        self.tokens_per_step = config.batch_size * config.block_size * world_size
        self.hook = (attach_instrumented_hook(self.ddp, comm=comm, comm_hook=comm_hook, comm_state=comm_state)
                     if instrumented else None)
        self.finish = Finish(self.ddp) if hasattr(self.ddp, "finish") else None

    def step(self, timers: list[StepTimer] = ()) -> StepRecord:
        """One training step, train.py's `train_step` (no barriers unless a timer adds them); `timers` bracket
        backward, the wrapper's finish() (if any) innermost, so backward_ms includes it."""
        record = run_step(self.train.train_step, self.ddp, self.shard, self.optimizer,
                          [*timers, *filter(None, [self.finish])])
        events = self.hook.end_step() if self.hook else []
        return StepRecord(record["loss"], record["step_ms"], record["forward_ms"], record["backward_ms"],
                          record["optimizer_ms"], events, self.finish.pop_ms() if self.finish else None)

    def steps(self, count: int) -> list[StepRecord]:
        """`count` training steps, in turn."""
        return [self.step() for _ in range(count)]


def rebuilt_buckets(ddp_model: DistributedDataParallel) -> tuple[list[int], list[int]]:
    """DDP's own record of its buckets after the rebuild at step 1: each bucket's bytes, and the
    parameter indices in bucket order (DDP logs them as text: "148608, 148992")."""
    data = ddp_model._get_ddp_logging_data()
    numbers = lambda key: [int(n) for n in re.findall(r"\d+", str(data.get(key, "")))]  # noqa: E731
    return numbers("rebuilt_bucket_sizes"), numbers("rebuilt_per_bucket_param_indices")
