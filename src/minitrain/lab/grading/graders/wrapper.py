"""Block A's grader (src/minitrain/ddp.py, the DDP wrapper): its five functions in a plain process, then in
a real 2-process gloo run under the lab's torchrun, on fixtures of its own (a tiny model, fixed halves of a
fixed batch: no other TODO). The ranks run this file; notebook 03, `make grade` and tests/minitrain/test_ddp.py
(the checker's condition 5) call grade_block_a."""

import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minitrain.gloo_setup import TORCHRUN_VARS, collective_timeout
from minitrain.hang_report import GLOO_GRACE, named_hang
from minitrain.lab.grading.graders.running import STILL_BLANK, ExerciseError, _leave
from minitrain.lab.grading.graders.timing import (GRAD_ATOL, _batch, _gradients, _max_diff, _reference_gradients,
                                                  _tiny_model)
from minitrain.launch import LaunchError, run_streaming, torchrun_command

FUNCTIONS = ("init_distributed", "wrap_for_ddp", "is_main_process", "barrier", "cleanup")  # the stub's order
WORLD_SIZE = 2
LATE_S = 0.5  # rank 1 calls barrier() and cleanup() this late: rank 0's call must wait for it
RUN_TIMEOUT_S = 180  # a rank stuck in a collective ends itself after collective_timeout() (60 s) and names where
DEFAULTS = ("device_ids", "find_unused_parameters", "gradient_as_bucket_view", "static_graph")
MIB = 2**20


class Blank(Exception):
    """A function of Block A still raises NotImplementedError; the message is its name."""


class Mistake(Exception):
    """A contract of Block A broken: the message names it, and what to change."""


def _gpu_habit(name: str, error: Exception) -> str | None:
    """The GPU tutorial's habit behind `error`, named, or None."""
    text = str(error)
    if "nccl" in text.lower():
        return (f"{name}() uses the nccl backend, which needs NVIDIA GPUs; this lab runs on CPUs: pass the backend "
                f"argument (\"gloo\") to dist.init_process_group ({type(error).__name__}: {text})")
    if "device_ids" in text:
        return (f"{name}() passes device_ids to DistributedDataParallel, which is for a model on GPUs; on CPUs drop "
                "it (PyTorch's defaults)")
    if "cuda" in text.lower():
        return (f"{name}() makes a CUDA call (torch.cuda.set_device, .cuda(), .to(rank)) and this machine has no GPU: "
                f"the lab runs on CPUs, drop it ({type(error).__name__}: {text})")
    return None


def _call(fn: Callable, *args, when: str = "", fix: str = ""):
    """fn(*args): a blank stub as Blank, any exception as the Mistake that names it (`when`: where it was called,
    `fix`: what to change)."""
    try:
        return fn(*args)
    except NotImplementedError as e:
        raise Blank(fn.__name__) from e
    except Exception as e:
        raise Mistake(_gpu_habit(fn.__name__, e)
                      or f"{fn.__name__}() {when}raised {type(e).__name__}: {str(e).rstrip('.')}{fix}") from e


# ------------------------------------------------------------------------------------------------
# The ranks (this file under the lab's torchrun): without a process group, then in it


def _wrap_needs_a_group(ddp: types.ModuleType) -> None:
    try:
        wrapped = ddp.wrap_for_ddp(_tiny_model())
    except NotImplementedError as e:
        raise Blank("wrap_for_ddp") from e
    except Exception as e:
        if isinstance(e, RuntimeError) and "init_distributed" in str(e):
            return
        did = f"raised {type(e).__name__}: {str(e).rstrip('.')}"
    else:
        did = f"returned a {type(wrapped).__name__}"
    raise Mistake(f"wrap_for_ddp() without a process group must raise RuntimeError naming init_distributed (call it "
                  f"first), but it {did}; check dist.is_initialized() before wrapping")


NO_GROUP = "without a process group, where it must do nothing, "


def _main_without_group(ddp: types.ModuleType) -> None:
    main = _call(ddp.is_main_process, when="without a process group (a plain single process, the main one) ",
                 fix="; check dist.is_initialized() before dist.get_rank()")
    if main is not True:
        raise Mistake(f"is_main_process() without a process group returned {main!r}: a plain single process is the "
                      "main one, return True (check dist.is_initialized() before dist.get_rank())")


def _barrier_without_group(ddp: types.ModuleType) -> None:
    _call(ddp.barrier, when=NO_GROUP, fix="; without a process group there is no one to wait for")


def _cleanup_without_group(ddp: types.ModuleType) -> None:
    for _ in range(2):  # safe to call twice
        _call(ddp.cleanup, when=NO_GROUP, fix="; leave the group only when dist.is_initialized()")


ALONE = (_wrap_needs_a_group, _main_without_group, _barrier_without_group, _cleanup_without_group)  # the stub's order


def _alone(ddp: types.ModuleType) -> tuple[list[str], list[str]]:
    """Each function's contract in a plain process (torchrun's variables hidden, no process group):
    the functions still blank, and the mistakes found."""
    blanks, mistakes = [], []
    with patch.dict(os.environ):
        for var in TORCHRUN_VARS:
            os.environ.pop(var, None)
        for check in ALONE:
            try:
                check(ddp)
            except Blank as e:
                blanks.append(str(e))
            except Mistake as e:
                mistakes.append(str(e))
    return blanks, mistakes


def _together(check: Callable[[], object]) -> object:
    """check() on every rank, then every rank's mistake gathered: all go on, or all stop with the lowest rank's."""
    try:
        result, mistake = check(), None
    except Mistake as e:
        result, mistake = None, str(e)
    found: list = [None] * dist.get_world_size()
    dist.all_gather_object(found, mistake)
    if any(found):
        raise Mistake(next(m for m in found if m))
    return result


def _joined(ddp: types.ModuleType, rank: int, called: str, fix: str = "") -> None:
    """init_distributed() `called` put this rank in a process group with the lab's timeout, and returned its place."""
    got = _call(ddp.init_distributed, "gloo", when=f"{called} ", fix=fix)
    if not dist.is_initialized():
        raise Mistake(f"init_distributed() {called} returned without joining a process group: call "
                      "dist.init_process_group(backend, **options)")
    if got != (rank, WORLD_SIZE) or not all(type(x) is int for x in got):
        raise Mistake(f"init_distributed() {called} returned {got!r} on rank {rank} of {WORLD_SIZE}: return "
                      f"(rank, world_size), two ints: ({rank}, {WORLD_SIZE})")
    timeout = dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout
    lab = collective_timeout() + GLOO_GRACE
    if timeout != lab:
        raise Mistake(f"the process group's timeout is {timeout}, not the {lab} that prepare_rank's options set: pass "
                      "them on, dist.init_process_group(backend, **options)")


def _joins_nothing_new(ddp: types.ModuleType, rank: int) -> None:
    group = dist.group.WORLD
    _joined(ddp, rank, "called a second time", fix="; calling it again must join nothing new: check "
            "dist.is_initialized() first")
    if dist.group.WORLD is not group:
        raise Mistake("init_distributed() called a second time made a new process group: when "
                      "dist.is_initialized(), join nothing new, only return (rank, world_size)")


def _main_on_rank_0(ddp: types.ModuleType, rank: int) -> None:
    main = _call(ddp.is_main_process, when=f"in the process group, on rank {rank}, ")
    if main is not (rank == 0):
        raise Mistake(f"is_main_process() returned {main!r} on rank {rank}: True on rank 0 only")


def _late(rank: int, fn: Callable) -> float:
    """fn() on every rank, rank 1 LATE_S late; the seconds fn() took on this rank."""
    dist.barrier()  # the grader's own: every rank starts here
    if rank == 1:
        time.sleep(LATE_S)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _barrier_waits(ddp: types.ModuleType, rank: int) -> float:
    waited = _late(rank, lambda: _call(ddp.barrier, when="in the process group "))
    if rank == 0 and waited < LATE_S / 2:
        raise Mistake(f"barrier() did not wait: rank 1 called it {LATE_S} s late and rank 0's call returned after "
                      f"{waited:.3f} s; with a process group, call dist.barrier()")
    return waited


def _wrapped(ddp: types.ModuleType, model: torch.nn.Module, *bucket_cap_mb: float) -> DistributedDataParallel:
    shown = f"wrap_for_ddp(model{''.join(f', {mb}' for mb in bucket_cap_mb)})"
    wrapped = _call(ddp.wrap_for_ddp, model, *bucket_cap_mb, when="in the process group ")
    if not isinstance(wrapped, DistributedDataParallel):
        raise Mistake(f"{shown} returned a {type(wrapped).__name__}, not the model wrapped in "
                      "DistributedDataParallel")
    defaults = inspect.signature(DistributedDataParallel).parameters
    for name in DEFAULTS:
        if getattr(wrapped, name) != defaults[name].default:
            raise Mistake(f"{shown} sets {name}={getattr(wrapped, name)!r}; the sheet asks for PyTorch's defaults "
                          f"({name}={defaults[name].default!r}): pass only the model and bucket_cap_mb")
    first, cap = wrapped._bucket_config.first_bucket_bytes_cap / MIB, wrapped.bucket_bytes_cap / MIB
    caps = f"{first:g} MiB first, then {cap:g} MiB"
    if not bucket_cap_mb and not wrapped.bucket_bytes_cap_default:
        raise Mistake(f"{shown} changed DDP's own bucket caps ({caps}): with bucket_cap_mb=None, pass "
                      "bucket_cap_mb=None on (1 MiB first, then 25 MiB)")
    if bucket_cap_mb and wrapped.bucket_bytes_cap != bucket_cap_mb[0] * MIB:
        raise Mistake(f"{shown} gave buckets of {caps}: pass bucket_cap_mb on to DistributedDataParallel")
    return wrapped


def _wraps_and_averages(ddp: types.ModuleType, rank: int) -> None:
    """Rank 1's model starts 1 away from rank 0's; after wrapping both hold rank 0's, and one backward on each
    rank's half of the batch gives the gradients of one process on the whole batch."""
    model = _tiny_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank)
    model = _wrapped(ddp, model)
    _wrapped(ddp, _tiny_model(), 1)
    init = _tiny_model().state_dict()
    if not all(torch.equal(v, init[k]) for k, v in model.module.state_dict().items()):
        raise Mistake(f"after wrap_for_ddp() rank {rank} does not hold rank 0's initial weights: let "
                      "DistributedDataParallel's constructor broadcast them (PyTorch's defaults)")
    inputs, targets = (t.chunk(WORLD_SIZE)[rank] for t in _batch())
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    diff = _max_diff(_gradients(model.module), _reference_gradients())
    if diff > GRAD_ATOL:
        raise Mistake(f"after one backward on halves of a batch, rank {rank}'s gradients differ from one process's "
                      f"on the whole batch by {diff:.2e}: return DistributedDataParallel(model, ...) itself")


def _cleanup_leaves(ddp: types.ModuleType, rank: int) -> float:
    waited = _late(rank, lambda: _call(ddp.cleanup, when="at the end of the run "))
    if dist.is_initialized():
        raise Mistake("cleanup() left the process group open: end with dist.destroy_process_group()")
    if rank == 0 and waited < LATE_S / 2:
        raise Mistake(f"cleanup() did not wait for every rank: rank 1 called it {LATE_S} s late and rank 0 left "
                      f"after {waited:.3f} s; a rank that leaves while a peer is mid-collective makes the peer abort "
                      "at exit: wait for every rank before leaving the group")
    _call(ddp.cleanup, when="called a second time, after leaving the group, ",
          fix="; it must do nothing then: leave the group only when dist.is_initialized()")
    return waited


def _in_group(ddp: types.ModuleType, rank: int) -> dict:
    """Every contract in the 2-rank process group (init_distributed has joined it); what rank 0 measured."""
    _together(lambda: _joins_nothing_new(ddp, rank))
    _together(lambda: _main_on_rank_0(ddp, rank))
    barrier_s = _together(lambda: _barrier_waits(ddp, rank))
    _together(lambda: _wraps_and_averages(ddp, rank))
    return {"barrier_s": barrier_s, "cleanup_s": _cleanup_leaves(ddp, rank)}


def _rank(ddp_path: str, out: str) -> None:
    """One rank: the learner's module from `ddp_path`, graded; what it found saved to out/rank-RANK.json."""
    rank = int(os.environ["RANK"])
    spec = importlib.util.spec_from_file_location("learner_ddp", ddp_path)
    ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp)
    blanks, mistakes = _alone(ddp)
    result: dict = {"measured": {}}
    try:
        _joined(ddp, rank, "under torchrun")
        if not blanks and not mistakes:
            result["measured"] = _in_group(ddp, rank)
    except Blank as e:
        blanks.insert(0, str(e))
    except Mistake as e:
        mistakes.append(str(e))
    result.update(blanks=blanks, mistakes=mistakes)
    if dist.is_initialized():
        _leave(out, rank, result)
    else:
        (Path(out) / f"rank-{rank}.json").write_text(json.dumps(result))


# ------------------------------------------------------------------------------------------------
# The grader


def grade_block_a(ddp: types.ModuleType | None = None) -> str:
    """Block A (`ddp`: the learner's module, by default minitrain.ddp) in a plain process and in a real
    2-process gloo run: one PASS line, or an ExerciseError naming the first mistake."""
    ddp = ddp or importlib.import_module("minitrain.ddp")
    missing = [name for name in FUNCTIONS if not callable(getattr(ddp, name, None))]
    if missing:
        raise ExerciseError(f"{ddp.__file__} has no {', '.join(missing)}: Block A is {', '.join(FUNCTIONS)}")
    output: list[str] = []
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        try:
            run_streaming(torchrun_command(Path(__file__), WORLD_SIZE, str(ddp.__file__), tmp),
                          timeout=RUN_TIMEOUT_S, echo=output.append)
            failed = None
        except TimeoutError as e:
            raise ExerciseError(f"the 2-process run of Block A did not end within {RUN_TIMEOUT_S} s and was stopped: "
                                f"{named_hang(chr(10).join(output)) or 'a rank waited for ever'}") from e
        except LaunchError as e:
            failed = e
        ranks = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank-*.json"))]
    return _verdict(ranks, output, failed)


def _verdict(ranks: list[dict], output: list[str], failed: LaunchError | None) -> str:
    blanks = [name for name in FUNCTIONS if any(name in rank["blanks"] for rank in ranks)]
    if blanks:
        raise ExerciseError(f"not done yet: Block A: {', '.join(blanks)} ({'each ' * (len(blanks) > 1)}{STILL_BLANK})")
    mistakes = [m for rank in ranks for m in rank["mistakes"]]
    if mistakes:
        raise ExerciseError(mistakes[0])
    text = "\n".join(output)
    if failed or len(ranks) < WORLD_SIZE or "terminate called" in text:
        why = named_hang(text) or ("a rank aborted at exit ('terminate called'): cleanup() must wait for every rank "
                                   "before it leaves the group" if "terminate called" in text
                                   else " | ".join(line for line in output[-3:] if line.strip()))
        raise ExerciseError(f"the 2-process run of Block A failed: {why}")
    barrier_s, cleanup_s = (ranks[0]["measured"][k] for k in ("barrier_s", "cleanup_s"))
    return ("Block A: correct. Without a process group is_main_process() is True, barrier() and cleanup() (twice) do "
            "nothing and wrap_for_ddp() raises RuntimeError naming init_distributed; in a real 2-process gloo run "
            "init_distributed() returns (rank, world_size) with the lab's timeout and, called again, joins nothing "
            f"new, is_main_process() is True on rank 0 only, barrier() waited {barrier_s:.2f} s for the late rank, "
            "wrap_for_ddp() (PyTorch's defaults) returned a DistributedDataParallel whose gradients came out "
            f"averaged, and cleanup() waited {cleanup_s:.2f} s for every rank, then left the group")


if __name__ == "__main__":
    # `python -m minitrain.launch --nproc-per-node=2 wrapper.py DDP_FILE OUT_DIR` (grade_block_a starts it)
    _rank(*sys.argv[1:3])
