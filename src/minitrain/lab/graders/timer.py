"""Block D variant A's grader (src/minitrain/timing.py): BarrierTimer's barriers and clock, alone and
in a real 2-process gloo DDP run with one rank late."""

import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minitrain.lab.graders.running import ExerciseError, _batch, _leave, _silence, _spawn, _tiny_model, join_group


ALONE_SLEEP_S = 0.05  # the single-process check: the "backward" is a sleep this long
TIMER_SCENARIOS = ("late start", "late finish")  # rank 1 sleeps TIMER_WAIT_S before before_backward / after backward
TIMER_WAIT_S = 0.5  # half of it separates a right figure from a wrong one, with room for a busy machine


def _timer_rank(folder: str, timer_cls: type) -> None:
    """One rank of the timer's run: per scenario, a real DDP backward between the timer's brackets,
    rank 1 late before them or after backward; the milliseconds each rank measured, saved."""
    rank = int(os.environ["RANK"])
    _silence(Path(folder) / f"rank-{rank}.log")
    _, world_size = join_group()
    model = DistributedDataParallel(_tiny_model())
    inputs, targets = (t.chunk(world_size)[rank] for t in _batch())
    results = {}
    for scenario in TIMER_SCENARIOS:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        timer = timer_cls(None)
        dist.barrier()
        try:
            if rank == 1 and scenario == "late start":
                time.sleep(TIMER_WAIT_S)
            timer.before_backward()
            loss.backward()
            if rank == 1 and scenario == "late finish":
                time.sleep(TIMER_WAIT_S)
            timer.after_backward()
            results[scenario] = ("ms", timer.pop_ms())
        except NotImplementedError as e:
            results[scenario] = ("blank", str(e))
        except Exception as e:
            results[scenario] = ("raised", f"{type(e).__name__}: {e}")
    _leave(folder, rank, results)


def _timer_alone(timer_cls: type) -> float | None:
    """One process, no process group: the timer around a sleep of ALONE_SLEEP_S; its figure."""
    timer = timer_cls(None)
    try:
        timer.before_backward()
        time.sleep(ALONE_SLEEP_S)
        timer.after_backward()
        return timer.pop_ms()
    except NotImplementedError as e:
        raise ExerciseError(f"{e}: BarrierTimer still raises NotImplementedError") from e
    except Exception as e:
        raise ExerciseError(f"without a process group (one process, as train.py runs with 1 rank) BarrierTimer "
                            f"raised {type(e).__name__}: {e}; call dist.barrier() only when "
                            "dist.is_initialized()") from e


def grade_barrier_timer(timer_cls: type) -> str:
    """Variant A's timer (a module's class: the workers import it): alone, its milliseconds of a
    sleep; in a real 2-process DDP run, rank 0's time must leave out rank 1's late start and take
    in rank 1's late finish (the barriers), in milliseconds."""
    ms = _timer_alone(timer_cls)
    if ms is None or isinstance(ms, bool) or not isinstance(ms, (int, float)):
        raise ExerciseError(f"nothing measured: after after_backward, pop_ms() gave {ms!r}; set self.ms to the "
                            "milliseconds from the clock's start to after the second barrier")
    if ALONE_SLEEP_S / 2 <= ms <= 20 * ALONE_SLEEP_S:
        raise ExerciseError(f"seconds, not milliseconds: around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer "
                            f"measured {ms:.3f}; timings.jsonl holds ms: multiply the perf_counter difference by 1e3")
    if not ALONE_SLEEP_S * 1e3 / 2 <= ms <= 20 * ALONE_SLEEP_S * 1e3:
        raise ExerciseError(f"around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer measured {ms:.3f} ms: start "
                            "the clock in before_backward and stop it in after_backward (time.perf_counter())")
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        _spawn(_timer_rank, 2, folder, timer_cls, run="with the timer")
        ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(2)]
    for rank, result in enumerate(ranks):
        for kind, detail in result.values():
            if kind != "ms":
                raise ExerciseError(f"in the 2-process run the timer raised on rank {rank}: {detail}")
    late_start, late_finish = (ranks[0][scenario][1] for scenario in TIMER_SCENARIOS)
    wait_ms = TIMER_WAIT_S * 1e3
    if late_start > wait_ms / 2:
        raise ExerciseError(f"no barrier before the clock: rank 1 reached backward {wait_ms:.0f} ms late and rank 0 "
                            f"measured {late_start:.0f} ms, its own wait included; call dist.barrier() first, then "
                            "start the clock (the barrier lines the ranks up)")
    if late_finish < wait_ms / 2:
        raise ExerciseError(f"no barrier before stopping the clock: rank 1 finished backward {wait_ms:.0f} ms late and "
                            f"rank 0 measured {late_finish:.0f} ms; call dist.barrier() after backward, then stop "
                            "the clock: the step is done when the slowest rank is")
    return (f"Block D variant A: correct. Alone, {ms:.0f} ms around a {ALONE_SLEEP_S * 1e3:.0f} ms sleep; in a real "
            f"2-process run, rank 0 measured {late_start:.0f} ms when rank 1 started {wait_ms:.0f} ms late (left "
            f"out) and {late_finish:.0f} ms when it finished {wait_ms:.0f} ms late (taken in)")
