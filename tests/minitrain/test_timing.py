"""What the instruments must not change: each rank's own shuffle seed (DDP's arithmetic with every
timing variant attached is checked in test_ddp_arithmetic.py, in its one real 2-process group). Then the timers
and summarize() alone."""

import time

import pytest
import torch

from minitrain.data import SEED_BASE, make_shard
from minitrain.comm_hook import InstrumentedHook
from minitrain.timing import (BY_NAME, STATISTICS, VARIANTS, BarrierTimer, HookTimer, manifest_fields, summarize,
                              timed_backward)

FIRST = dict(batch_size=4, block_size=32)


def first_batch(rank: int, corpus_dir, **seed: int) -> torch.Tensor:
    inputs, targets = next(make_shard(rank, 2, corpus_dir, **FIRST, **seed))
    return torch.cat([inputs, targets[:, -1:]], dim=1)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_shuffles_with_its_own_seed(corpus_dir, rank):
    """The sheet: rank r shuffles its shard with seed 35000 + r (make_shard's default)."""
    default = first_batch(rank, corpus_dir)
    assert torch.equal(default, first_batch(rank, corpus_dir, seed=SEED_BASE + rank))
    other = first_batch(rank, corpus_dir, seed=SEED_BASE + 1 - rank)  # the other rank's seed
    assert not torch.equal(default, other)  # the seed decides the order: the check has teeth


def test_the_ranks_first_epochs_use_different_orders(corpus_dir):
    """Rank 1's first batch is not what rank 1's sentences give in rank 0's order (seed 35000)."""
    assert not torch.equal(first_batch(1, corpus_dir), first_batch(1, corpus_dir, seed=SEED_BASE))


# ------------------------------------------------------------------------------------------------
# The timers in one process, without a process group


def test_barrier_timer_without_a_process_group():
    timer = BarrierTimer()
    assert timer.pop_ms() is None  # nothing measured yet
    timer.before_backward()
    time.sleep(0.02)
    timer.after_backward()
    assert 20 <= timer.pop_ms() < 2000
    assert timer.pop_ms() is None  # popped: the next step starts empty


def test_hook_timer_sums_the_buckets_and_advances_the_step():
    hook = InstrumentedHook()
    timer = HookTimer(hook)
    timer.before_backward()
    timer.after_backward()
    assert timer.pop_ms() is None and hook.step == 1  # no event: no all-reduce ran
    hook.events = [{"step": 1, "bucket": 0, "ready": 10.0, "done": 10.002},
                   {"step": 1, "bucket": 1, "ready": 10.001, "done": 10.004}]
    assert timer.pop_ms() == pytest.approx(5.0)
    assert hook.events == [] and hook.step == 2
    assert timer.pop_ms() is None


def test_variants_attach_their_timers():
    hook = InstrumentedHook()
    assert isinstance(BY_NAME["barrier"].attach(hook), BarrierTimer)
    hook_timer = BY_NAME["hook"].attach(hook)
    assert isinstance(hook_timer, HookTimer) and hook_timer.hook is hook
    assert len({v.key for v in VARIANTS}) == len({v.field for v in VARIANTS}) == len(VARIANTS)
    assert manifest_fields(BY_NAME["hook"]) == {"allreduce_p50_ms": "median", "allreduce_p95_ms": "p95",
                                                "allreduce_mean_ms": "mean"}
    assert set(STATISTICS.values()) == set(summarize([1.0]))


def test_timed_backward_brackets_backward_in_nested_order():
    calls = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def before_backward(self) -> None:
            calls.append((self.name, "before", w.grad is None))

        def after_backward(self) -> None:
            calls.append((self.name, "after", w.grad is None))

    w = torch.ones(3, requires_grad=True)
    timed_backward((2 * w).sum(), [Recorder("outer"), Recorder("inner")])
    assert calls == [("outer", "before", True), ("inner", "before", True),
                     ("inner", "after", False), ("outer", "after", False)]
    assert torch.equal(w.grad, torch.full((3,), 2.0))


# ------------------------------------------------------------------------------------------------
# summarize


@pytest.mark.parametrize("values, mean, median, p95", [
    ([5.0], 5.0, 5.0, 5.0),
    ([3.0, 1.0, 2.0], 2.0, 2.0, 3.0),
    ([4.0, 1.0, 3.0, 2.0], 2.5, 2.5, 4.0),  # even count: the median between the middle two
    ([float(v) for v in range(1, 21)], 10.5, 10.5, 19.0),  # nearest rank: ceil(0.95 x 20) = 19th
    ([float(v) for v in range(1, 101)], 50.5, 50.5, 95.0),
    ([float(v) for v in range(1, 22)], 11.0, 11.0, 20.0),  # ceil(0.95 x 21) = 20th
])
def test_summarize(values, mean, median, p95):
    assert summarize(values) == {"mean": pytest.approx(mean), "median": median, "p95": p95}
    assert summarize(list(reversed(values))) == summarize(values)  # order does not matter


def test_block_d_s_file_does_not_write_out_the_exercise_s_hook():
    """timing.py, which the learner opens for Block D, holds no comm hook: notebook 04's exercise (variant B's hook)
    is not written out there; the lab's own hook is minitrain.comm_hook's (and make lab never needs the exercise)."""
    import inspect

    import minitrain.timing

    source = inspect.getsource(minitrain.timing)
    for pattern in ("def instrumented_allreduce_hook", "allreduce_hook(", "get_future", ".then(", "register_comm_hook"):
        assert pattern not in source, pattern
