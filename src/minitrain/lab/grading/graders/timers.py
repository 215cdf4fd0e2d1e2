"""The timing graders: 04-launch-and-timing's my_timing_hook as the comm hook of real gloo DDP runs at
3 and 2 processes, and Block D's BarrierTimer (src/minitrain/timing.py), both with one rank late."""

import dis
import inspect
import json
import os
import tempfile
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minitrain.lab.grading.graders.learner import solution_cell
from minitrain.lab.grading.graders.running import (STILL_BLANK, ExerciseError, gpu_habit, join_group, save_and_leave,
                                                   silence_output, spawn_ranks, wait_for_every_rank)
from minitrain.lab.grading.graders.tiny_model import (GRAD_ATOL, fixed_batch, gradients, max_diff, reference_gradients,
                                                      tiny_model)
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.script import import_script
from minitrain.todo import NotDone

# ------------------------------------------------------------------------------------------------
# 04-launch-and-timing: my_timing_hook(state, bucket) -> torch.futures.Future (the learner's source runs
# in the workers: a function defined in a notebook's __main__ does not pickle)

WORLD_SIZES = (3, 2)  # 3 first: a hard-coded 2 shows there
WAIT_S = 0.3  # rank 1 sleeps this long before backward: rank 0's all-reduce waits for it
HOOK_MODULE = "learner_hook"


def _global_names(code: types.CodeType) -> set[str]:
    """Names a function (and the functions inside it) looks up in its module's globals."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def hook_module_source(fn: Callable) -> str:
    """A module that defines `fn` as the learner wrote it, for processes that never ran the notebook:
    one line per global it uses (a module, a name imported from a module, a literal), then its source."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ExerciseError(f"cannot read the source of {fn!r} ({e}): define it with `def` in a cell") from e
    lines = []
    for name in sorted(_global_names(fn.__code__) - {fn.__name__}):
        if name not in fn.__globals__:
            continue  # a builtin (or a NameError the run reports)
        value = fn.__globals__[name]
        origin = getattr(value, "__module__", None)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif isinstance(value, (bool, int, float, str)):
            lines.append(f"{name} = {value!r}")
        elif origin not in (None, "__main__") and getattr(value, "__qualname__", ".").isidentifier():
            lines.append(f"from {origin} import {value.__qualname__} as {name}")
        else:
            raise ExerciseError(f"{fn.__name__} uses `{name}`, defined in this notebook: the grader runs your hook "
                                "in 2 new processes, which get only the hook's own source and what it imports; "
                                f"move `{name}` inside the hook, or import it from a module")
    header = "# written by minitrain.lab.grading.graders: the learner's hook, for the grader's worker processes"
    return "\n".join(["from __future__ import annotations", header, *lines, "", "", source])


def _completed(tensor: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def _guarded(hook: Callable, problems: list) -> Callable:
    """The learner's hook, with what would crash DDP (an exception, no future, a list-valued future)
    noted in `problems` and replaced by the bucket's own tensor, so that the run ends and reports."""
    def guarded(state, bucket):
        called = time.perf_counter()
        try:
            fut = hook(state, bucket)
        except NotImplementedError:
            problems.append(("blank", ""))
            return _completed(bucket.buffer())
        except Exception as e:
            problems.append(("raised", f"{type(e).__name__}: {e}"))
            return _completed(bucket.buffer())
        if not isinstance(fut, torch._C.Future):  # torch.futures.Future's base; get_future() returns one
            problems.append(("returned", type(fut).__name__))
            return _completed(bucket.buffer())
        problems.append(("call took", time.perf_counter() - called))  # a hook that blocks takes the peer's lateness

        def value(f: torch.futures.Future) -> torch.Tensor:
            try:
                result = f.value()
            except Exception as e:
                lines = str(e).strip().splitlines()  # "Got the following error when running the callback: ...", frames
                where = [line.strip().rsplit("/", 1)[-1] for line in lines if HOOK_MODULE in line][-1:]
                problems.append(("callback raised", " at ".join([lines[0].split("the callback: ")[-1][:200], *where])))
                return bucket.buffer()
            if isinstance(result, (list, tuple)):
                problems.append(("list", ""))
                return result[0]
            return result

        return fut.then(value)
    return guarded


def _hook_rank(folder: str, fn_name: str) -> None:
    """One rank of the grader's run: wrap the tiny model, register the learner's hook, take this
    rank's half of the batch, make rank 1 late for backward, and save gradients and what was recorded."""
    folder = Path(folder)
    rank = int(os.environ["RANK"])
    silence_output(folder / f"rank-{rank}.log")
    rank, world_size = join_group()
    module = import_script(folder / f"{HOOK_MODULE}.py")
    recorded: list = []
    problems: list = []
    model = DistributedDataParallel(tiny_model())
    model.register_comm_hook(recorded, _guarded(getattr(module, fn_name), problems))
    inputs, targets = (t.chunk(world_size)[rank] for t in fixed_batch())
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    wait_for_every_rank()  # every rank starts from here
    if rank == 1:
        time.sleep(WAIT_S)
    start = time.perf_counter()
    loss.backward()
    backward_s = time.perf_counter() - start
    torch.save({"grads": gradients(model.module), "backward_s": backward_s, "problems": problems,
                "recorded": [v if isinstance(v, float) else float(v) if isinstance(v, int) else repr(v)[:80]
                             for v in recorded]},
               folder / f"rank-{rank}.pt")
    wait_for_every_rank()
    dist.destroy_process_group()


def _run_hook(fn: Callable, source: str, world_size: int) -> list[dict]:
    """Each rank's record of one real run of `fn` (from `source`) as the comm hook, at `world_size`."""
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        (folder / f"{HOOK_MODULE}.py").write_text(source)
        spawn_ranks(_hook_rank, world_size, folder, fn.__name__, run=f"with {fn.__name__}")
        return [torch.load(folder / f"rank-{r}.pt", weights_only=True) for r in range(world_size)]


def grade_timing_hook(fn: Callable) -> str:
    """Run `fn` as the comm hook of real gloo DDP runs at 3 and 2 processes (a tiny float64 model,
    one step, rank 1 late by WAIT_S), then check the gradients against one process on the whole
    batch, that the hook returned at once, and the recorded seconds against rank 0's wait."""
    source = hook_module_source(fn)
    try:  # a blank stub says so at once, before any process starts
        fn([], types.SimpleNamespace(buffer=lambda: torch.zeros(1), index=lambda: 0, parameters=lambda: []))
    except NotImplementedError as e:
        raise NotDone(f"{fn.__name__} {STILL_BLANK}") from e
    except Exception:
        pass  # no process group here: the real runs below say what is wrong
    if "allreduce_hook" in source:  # right, but the exercise is to write what it does (the lab's variant B calls it)
        raise ExerciseError(f"{fn.__name__} calls PyTorch's own allreduce_hook: the exercise is to write its "
                            "all-reduce yourself, from bucket.buffer() with dist.all_reduce and the division")
    for world_size in WORLD_SIZES:
        ranks = _run_hook(fn, source, world_size)
        _check_hook_problems(fn, ranks, source)
        seconds = _check_hook_gradients(fn, ranks, world_size)
    return (f"{fn.__name__}: correct. In real gloo runs of {' and '.join(map(str, WORLD_SIZES))} processes, every "
            f"rank's gradients equal one process's on the whole batch (float64, atol {GRAD_ATOL:g}), the hook "
            f"returned at once, and rank 0 recorded {seconds:.3f} s: its wait for rank 1, which started "
            f"backward {WAIT_S} s late")


def _check_hook_problems(fn: Callable, ranks: list[dict], source: str) -> None:
    name = fn.__name__
    for rank, result in enumerate(ranks):
        for kind, detail in result["problems"]:
            if kind == "call took":
                continue
            if kind == "blank":
                raise NotDone(f"{name} {STILL_BLANK}")
            if kind in ("raised", "callback raised") and (habit := gpu_habit(name, detail)):
                raise ExerciseError(habit)
            messages = {
                "raised": f"{name} raised {detail} on rank {rank}",
                "returned": f"{name} returned {detail}, not a torch.futures.Future: return the all-reduce's "
                            "future (dist.all_reduce(..., async_op=True).get_future()), chained with .then",
                "list": f"the future {name} returned completes with a list of tensors, as the all-reduce's own "
                        "future does; DDP needs a future of the bucket's tensor (it fails with 'expected the hook "
                        "result is a PyObject'): return fut.then(callback), the callback returning fut.value()[0]",
                "callback raised": f"the .then callback of {name} raised on rank {rank}: {detail}",
            }
            raise ExerciseError(messages[kind])
    blocked = max((d for kind, d in ranks[0]["problems"] if kind == "call took"), default=0.0)
    if blocked > WAIT_S / 2:
        if "barrier" in source:
            raise ExerciseError(f"barrier inside the hook: on rank 0 the call to {name} took {blocked:.2f} s, "
                                "waiting for the late rank at a barrier; DDP calls the hook from backward, "
                                "per bucket: launch the all-reduce and return its future, with no barrier")
        raise ExerciseError(f"blocking hook: on rank 0 the call to {name} took {blocked:.2f} s, the late rank's "
                            "wait: the all-reduce ran synchronously inside it. Launch it with async_op=True, "
                            "return its future at once, and stop the clock in a .then callback")


def _check_hook_gradients(fn: Callable, ranks: list[dict], world_size: int) -> float:
    """The gradient checks, then the timing checks; returns rank 0's recorded seconds."""
    name = fn.__name__
    grads = [r["grads"] for r in ranks]
    if any(g is None for r in grads for g in r.values()):
        raise ExerciseError(f"no gradients after backward with {name}: return the future of the all-reduce")
    reference = reference_gradients()
    if max_diff(grads[0], grads[-1]) > GRAD_ATOL:
        raise ExerciseError(f"no all-reduce: after backward the ranks' gradients differ (by "
                            f"{max_diff(grads[0], grads[-1]):.2e}); each kept the gradient of its own part "
                            "of the batch. All-reduce the bucket's buffer and return that all-reduce's future")
    if max_diff(grads[0], reference) > GRAD_ATOL:
        if max_diff(grads[0], reference, world_size) <= GRAD_ATOL:
            raise ExerciseError(f"no division by the world size: the gradients came out {world_size}x the "
                                "single-process reference. all_reduce sums the ranks' gradients; divide the "
                                f"bucket by the world size ({world_size}) to average them")
        if max_diff(grads[0], reference, 1 / world_size) <= GRAD_ATOL:
            raise ExerciseError(f"divided twice: the gradients came out 1/{world_size} of the single-process "
                                "reference; divide by the world size once")
        for wrong in {2, 3} - {world_size}:
            if max_diff(grads[0], reference, world_size / wrong) <= GRAD_ATOL:
                raise ExerciseError(f"divided by {wrong}, not the world size: at {world_size} processes the "
                                    f"gradients came out {world_size}/{wrong} of the single-process reference; "
                                    "divide by dist.get_world_size()")
        raise ExerciseError(f"the averaged gradients differ from one process on the whole batch by "
                            f"{max_diff(grads[0], reference):.2e} (tolerance {GRAD_ATOL:g})")
    recorded = [r["recorded"] for r in ranks]
    for rank, values in enumerate(recorded):
        if not values:
            raise ExerciseError(f"nothing recorded: state is empty on rank {rank} after backward; append the "
                                "seconds from launch to completion to it (in the .then callback)")
        if not all(isinstance(v, float) for v in values):
            raise ExerciseError(f"state holds {values[0]!r} on rank {rank}: append the seconds as a number "
                                "(a difference of time.perf_counter() readings)")
    seconds, waited = max(recorded[0]), ranks[0]["backward_s"]
    if waited < WAIT_S / 2:  # the grader's own set-up, not the learner's hook
        raise RuntimeError(f"the grader's run did not make rank 0 wait ({waited:.3f} s); run it again")
    if seconds < waited / 2:
        raise ExerciseError(f"clock stopped before the future completed: rank 0's backward waited {waited:.2f} s "
                            f"for rank 1 (which started {WAIT_S} s late), but {name} recorded {seconds:.4f} s. "
                            "dist.all_reduce(..., async_op=True) returns at once; stop the clock in a .then "
                            "callback, which runs when the all-reduce has completed")
    if seconds > 2 * waited + 0.05:
        unit = " (milliseconds? record seconds)" if 0.3 < seconds / (1e3 * waited) < 3 else ""
        raise ExerciseError(f"{name} recorded {seconds:.3f} on rank 0, more than its whole backward took "
                            f"({waited:.3f} s){unit}; start the clock when the hook launches the all-reduce")
    return seconds


# ------------------------------------------------------------------------------------------------
# Block D variant A (src/minitrain/timing.py): BarrierTimer's barriers and clock

ALONE_SLEEP_S = 0.2  # the single-process check: the "backward" is a sleep this long (its seconds, 0.2, lie far from
# the CPU milliseconds a process_time() clock reads around it, so the two mistakes are told apart)
TIMER_SCENARIOS = ("late start", "late finish")  # rank 1 sleeps TIMER_WAIT_S before before_backward / after backward
TIMER_WAIT_S = 0.5  # half of it separates a right figure from a wrong one, with room for a busy machine


def _timer_rank(folder: str, timer_cls: type) -> None:
    """One rank of the timer's run: per scenario, a real DDP backward between the timer's brackets,
    rank 1 late before them or after backward; the milliseconds each rank measured, saved."""
    rank = int(os.environ["RANK"])
    silence_output(Path(folder) / f"rank-{rank}.log")
    _, world_size = join_group()
    model = DistributedDataParallel(tiny_model())
    inputs, targets = (t.chunk(world_size)[rank] for t in fixed_batch())
    results = {}
    for scenario in TIMER_SCENARIOS:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        timer = timer_cls(None)
        wait_for_every_rank()
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
            results[scenario] = ("blank", blank.what(e) or str(e))
        except Exception as e:
            results[scenario] = ("raised", f"{type(e).__name__}: {e}")
    save_and_leave(folder, rank, results)


def _timer_alone(timer_cls: type, sleep_s: float = ALONE_SLEEP_S) -> tuple[float | None, float]:
    """One process, no process group: the timer around a sleep of `sleep_s`; its figure, and the seconds from
    before_backward's call to after_backward's return, by the grader's clock."""
    timer = timer_cls(None)
    try:
        start = time.perf_counter()
        timer.before_backward()
        time.sleep(sleep_s)
        timer.after_backward()
        return timer.pop_ms(), time.perf_counter() - start
    except NotImplementedError as e:
        raise NotDone(f"{blank.what(e) or e}: BarrierTimer still raises NotImplementedError") from e
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"
        raise ExerciseError(gpu_habit("BarrierTimer", detail) or (
            "without a process group (a plain process: BarrierTimer's docstring says it still measures there) "
            f"BarrierTimer raised {detail}; call dist.barrier() only when dist.is_initialized()")) from e


def _in_seconds(ms: float | None, wall_s: float) -> bool:
    """Whether the timer's figure is the grader's own span around the calls, in seconds."""
    return isinstance(ms, (int, float)) and abs(ms - wall_s) <= 0.005 + wall_s / 10


def grade_barrier_timer(timer_cls: type) -> str:
    """Variant A's timer (a module's class: the workers import it): alone, its milliseconds of a
    sleep; in a real 2-process DDP run, rank 0's time must leave out rank 1's late start and take
    in rank 1's late finish (the barriers), in milliseconds."""
    ms, wall_s = _timer_alone(timer_cls)
    if ms is None or isinstance(ms, bool) or not isinstance(ms, (int, float)):
        raise ExerciseError(f"nothing measured: after after_backward, pop_ms() gave {ms!r}; set self.ms to the "
                            "milliseconds from the clock's start to after the second barrier")
    if ms < 0:
        why = ("the readings subtracted the wrong way round: end - start" if abs(ms + wall_s * 1e3) < wall_s * 1e3 / 2
               else "* binds before -, so only the clock's start was multiplied by 1e3; multiply the difference of "
               "the two readings")
        raise ExerciseError(f"a negative time: around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer measured "
                            f"{ms:.4g} ms: {why}")
    if _in_seconds(ms, wall_s) and _in_seconds(*_timer_alone(timer_cls, 2 * ALONE_SLEEP_S)):
        # twice: a CPU clock's fraction of a millisecond can match the span in seconds once, not as the sleep doubles
        raise ExerciseError(f"seconds, not milliseconds: around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer "
                            f"measured {ms:.3f}; timings.jsonl holds ms: multiply the perf_counter difference by 1e3")
    if ms < ALONE_SLEEP_S * 1e3 / 2:
        raise ExerciseError(f"the clock missed the wait: around a {ALONE_SLEEP_S * 1e3:.0f} ms sleep standing in for "
                            f"backward the timer measured {ms:.4g}; read a wall clock, time.perf_counter(), in "
                            "before_backward and again in after_backward (time.process_time() counts only this "
                            "process's CPU time, which a wait does not use)")
    if ms > 20 * ALONE_SLEEP_S * 1e3:
        raise ExerciseError(f"around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer measured {ms:.3f} ms: start "
                            "the clock in before_backward and stop it in after_backward (time.perf_counter())")
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        spawn_ranks(_timer_rank, 2, folder, timer_cls, run="with the timer")
        ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(2)]
    for rank, result in enumerate(ranks):
        for kind, detail in result.values():
            if kind != "ms":
                raise ExerciseError(gpu_habit("BarrierTimer", detail)
                                    or f"in the 2-process run the timer raised on rank {rank}: {detail}")
    late_start, late_finish = (ranks[0][scenario][1] for scenario in TIMER_SCENARIOS)
    wait_ms = TIMER_WAIT_S * 1e3
    if late_start > wait_ms / 2:
        raise ExerciseError(f"no barrier before the clock: rank 1 reached backward {wait_ms:.0f} ms late and rank 0 "
                            f"measured {late_start:.0f} ms, its own wait included; call dist.barrier() first, then "
                            "start the clock (the barrier lines the ranks up; a clock started before it times the "
                            "wait)")
    if late_finish < wait_ms / 2:
        raise ExerciseError(f"no barrier before stopping the clock: rank 1 finished backward {wait_ms:.0f} ms late and "
                            f"rank 0 measured {late_finish:.0f} ms; call dist.barrier() after backward, then stop "
                            "the clock: the step is done when the slowest rank is (a clock stopped before the barrier "
                            "misses it)")
    return (f"Block D variant A: correct. Alone, {ms:.0f} ms around a {ALONE_SLEEP_S * 1e3:.0f} ms sleep; in a real "
            f"2-process run, rank 0 measured {late_start:.0f} ms when rank 1 started {wait_ms:.0f} ms late (left "
            f"out) and {late_finish:.0f} ms when it finished {wait_ms:.0f} ms late (taken in)")


def grade_d(repo: Path, todo: Todo) -> str:
    """Block D: the graded tree's BarrierTimer."""
    from minitrain import timing
    return grade_barrier_timer(timing.BarrierTimer)


def grade_ex04(repo: Path, todo: Todo) -> str:
    """Notebook 04's exercise: the learner's my_timing_hook, from its solution cell."""
    with solution_cell(repo, todo, "my_timing_hook") as (hook, _):
        return grade_timing_hook(hook)
