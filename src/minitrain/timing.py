"""Timing a DDP step: where the all-reduce happens and what it costs.

Each way of timing is a `TimingVariant` in `VARIANTS`; train.py, the report, the checker, the
notebooks and `make bench` loop over that registry, so a new variant is one entry here.
Variant A (the sheet's): `dist.barrier()` before and after `loss.backward()`. The bracketed time
holds the backward pass, the all-reduce DDP launches inside it (overlapping the rest of backward
only when there are several buckets) and the wait for the slower rank, which happens inside that
all-reduce: DDP's backward returns only once its all-reduces have completed.
Variant B: DDP's own all-reduce comm hook with a stopwatch (minitrain.comm_hook), from each bucket's
launch to its completion, summed over the step's buckets: the transfer, plus any wait for the other
rank to launch the same bucket.
"""

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function

from minitrain.comm_hook import InstrumentedHook, allreduce_ms


class StepTimer(Protocol):
    """What a timing variant does around `loss.backward()`, and the milliseconds it measured."""

    def before_backward(self) -> None: ...
    def after_backward(self) -> None: ...
    def pop_ms(self) -> float | None: ...  # this step's figure, None when nothing was measured


class BarrierTimer:
    """Variant A: a barrier, then the clock, `loss.backward()`, a barrier, the clock: it times backward, the all-reduce
    DDP runs inside it and the wait for the slower rank, not the all-reduce alone. pop_ms() gives the
    milliseconds between the two clock reads, of a wall clock (time.perf_counter(): the waits count; on CPUs,
    no torch.cuda to synchronize). Without a process group (a plain Python process, as a unit test uses it)
    there is no one to wait for: the timer skips the barriers and still measures."""

    def __init__(self, hook: InstrumentedHook | None = None) -> None:  # the hook is not needed here
        self.start, self.ms = 0.0, None

    def before_backward(self) -> None:
        ### BEGIN SOLUTION: Block D: BarrierTimer.before_backward
        if dist.is_initialized():
            dist.barrier()  # both ranks start backward together
        self.start = time.perf_counter()
        ### END SOLUTION

    def after_backward(self) -> None:
        ### BEGIN SOLUTION: Block D: BarrierTimer.after_backward
        if dist.is_initialized():
            dist.barrier()  # backward returned after its all-reduces, which lined the ranks up; this adds a round trip
        self.ms = (time.perf_counter() - self.start) * 1e3
        ### END SOLUTION

    def pop_ms(self) -> float | None:
        ms, self.ms = self.ms, None
        return ms


class HookTimer:
    """Variant B: the lab's comm hook's (minitrain.comm_hook) launch-to-completion times, summed over buckets."""

    def __init__(self, hook: InstrumentedHook) -> None:
        self.hook = hook

    def before_backward(self) -> None:
        pass

    def after_backward(self) -> None:
        pass

    def pop_ms(self) -> float | None:
        return allreduce_ms(self.hook.end_step())


@dataclass(frozen=True)
class TimingVariant:
    key: str  # "A", "B": how the lesson names it
    name: str  # train.py --timing NAME
    field: str  # the timings.jsonl key it writes, in ms
    label: str  # what it measures, for tables and figures
    attach: Callable[[InstrumentedHook], StepTimer]  # given the run's instrumented comm hook


VARIANTS = (
    TimingVariant("A", "barrier", "backward_allreduce_ms",
                  "A: barrier | backward + all-reduce + wait for the slower rank | barrier",
                  BarrierTimer),
    TimingVariant("B", "hook", "allreduce_ms",
                  "B: comm hook, bucket launch to completion, summed over buckets (transfer + wait for the peer)",
                  HookTimer),
)
BY_NAME = {v.name: v for v in VARIANTS}
STATISTICS = {"p50": "median", "p95": "p95", "mean": "mean"}  # manifest suffix -> summarize() key


def manifest_fields(variant: TimingVariant) -> dict[str, str]:
    """The manifest's fields for a variant and the statistic each holds: allreduce_p50_ms -> median, ..."""
    stem = variant.field.removesuffix("_ms")
    return {f"{stem}_{suffix}_ms": stat for suffix, stat in STATISTICS.items()}


def timed_backward(loss: torch.Tensor, timers: list[StepTimer]) -> None:
    """`loss.backward()`, where DDP's all-reduce fires, with each timer's brackets around it (the last timer's
    innermost), named "backward" in a profiler's trace."""
    for timer in timers:
        timer.before_backward()
    with record_function("backward"):  # a named slice in a profiler trace (the measurements'); a few µs unprofiled
        loss.backward()
    for timer in reversed(timers):
        timer.after_backward()


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, median and p95 (nearest-rank) of a list of measurements."""
    ordered = sorted(values)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
    return {"mean": statistics.fmean(ordered), "median": statistics.median(ordered), "p95": p95}
