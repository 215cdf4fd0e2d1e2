"""What every grader shares: its error, the learner's calls turned into messages, and the real
gloo runs (a process group joined without the learner's Block A, each rank's output kept apart)."""

import json
import os
import runpy
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

from minitrain.gloo_setup import collective_timeout, loopback_interface, use_libuv
from minitrain.hang_report import watched_group_timeout
from minitrain.lab.todos import blank
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.parent_watch import exit_with_parent
from minitrain.todo import NotDone

STILL_BLANK = "still raises NotImplementedError; replace `# YOUR CODE HERE` and the `raise` under it with your code"


class ExerciseError(AssertionError):
    """The learner's function is wrong: the mistake named, and what to change (a blank one is the core's NotDone);
    an AssertionError, so that nbgrader counts the grader's cell as failed."""


def gpu_habit(who: str, detail: str) -> str | None:
    """The GPU tutorial's habit behind an error `detail` ("Type: message") that `who` raised, named with what to
    change, or None: on a machine without NVIDIA GPUs it shows only as this error."""
    text = detail.lower()
    if "nccl" in text:
        return (f"{who} uses the nccl backend, which needs NVIDIA GPUs; this lab runs on CPUs: pass the backend "
                f"argument (\"gloo\") to dist.init_process_group ({detail})")
    if "device_ids" in text:
        return (f"{who} passes device_ids to DistributedDataParallel, which is for a model on GPUs; on CPUs drop "
                "it (PyTorch's defaults)")
    if "cuda" in text or "accelerator" in text:  # .to(rank) says "Cannot access accelerator device"
        return (f"{who} makes a CUDA call (torch.cuda.set_device or .synchronize, .cuda(), .to(rank)) and this "
                f"torch has no GPU to use: the lab runs on CPUs, drop it ({detail})")
    if detail.startswith("KeyError") and any(f"'{v}'" in detail for v in ("LOCAL_RANK", "RANK", "WORLD_SIZE")):
        return (f"{who} reads a variable only torchrun sets ({detail}): the grader calls it in a plain process too; "
                "take the rank and world size from the arguments, or from dist.get_rank() in a process group")
    if "AVG with Gloo" in detail:  # gloo has ReduceOp.AVG since torch 2.8 (pytorch#149781); an older one raises
        return (f"{who} all-reduces with ReduceOp.AVG, which this torch's gloo does not have (NCCL's habit): "
                f"sum, the default op, and divide by the world size ({detail})")
    return None


def call_learner(fn: Callable, *args, shown: str = "", when: str = "", fix: str = "", blank: str = ""):
    """fn(*args): a blank stub as NotDone(`blank`, by default fn's name); any other exception as the ExerciseError
    naming the call (`shown`, by default "fn()") and the GPU habit behind it, or `when` it was called (the exception's
    last period then dropped) and the `fix`."""
    shown = shown or f"{fn.__name__}()"
    try:
        return fn(*args)
    except NotImplementedError as e:
        raise NotDone(blank or fn.__name__) from e
    except ExerciseError:
        raise  # a grader's own check inside fn (Block A's spy on init_process_group)
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"
        said = f"{type(e).__name__}: {str(e).rstrip('.')}{fix}" if when or fix else detail
        raise ExerciseError(gpu_habit(shown, detail) or f"{shown} {when}raised {said}") from e


def join_group() -> tuple[int, int]:
    """Join spawn_workers' process group as init_distributed does, without the learner's code (which
    may be blank or wrong in the tree being graded), a collective waiting longer than collective_timeout()
    ending the rank with the line where it waits (hang_report); return (rank, world_size)."""
    timeout = collective_timeout()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    exit_with_parent(f"grader rank {rank}")  # a grader stopped outright must not leave its workers
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=False, timeout=timeout, use_libuv=use_libuv())
    dist.init_process_group("gloo", store=dist.PrefixStore("default_pg", store), rank=rank,
                            world_size=world_size, timeout=watched_group_timeout(rank, timeout))
    return rank, world_size


def silence_output(log: Path) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to `log`: a notebook cell shows
    a child's raw output in Jupyter but not under nbval, so the workers must print nothing there."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def wait_for_every_rank() -> None:
    """The graders' own meeting point: gloo's monitored barrier names a rank that never arrives. Not a gather:
    its work holds Python tensors, and a group freed right after one can deadlock on the GIL (torch 2.13)."""
    dist.monitored_barrier()


def save_and_leave(folder: str, rank: int, results: dict) -> None:
    """A grader rank's end: its results saved for the grader, then every rank leaves the group together."""
    (Path(folder) / f"rank-{rank}.json").write_text(json.dumps(results))
    wait_for_every_rank()
    dist.destroy_process_group()


def script_rank(logs: str, script: str, argv: list[str]) -> None:
    """One rank of spawn_workers: `python SCRIPT ARGV` as torchrun would start it (its variables set), its output
    to logs/rank-R.log."""
    silence_output(Path(logs) / f"rank-{os.environ['RANK']}.log")
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def rank_logs(folder: str | Path) -> str:
    """What the ranks printed to `folder`/rank-R.log (silence_output), rank 0's lines first."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(Path(folder).glob("rank-*.log")))


def rank_log_tails(folder: Path) -> str:
    """The last 15 lines of each rank's log in `folder`, under the rank's number."""
    tails = [f"--- rank {p.stem.split('-')[-1]}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
             for p in sorted(folder.glob("rank-*.log"))]
    return "\n".join(tails)


RUN_LIMIT_S = 300.0  # a grader's run takes seconds; past this it hangs (after its last collective too): killed


def spawn_ranks(worker: Callable, world_size: int, folder: Path, *args, run: str) -> None:
    """spawn_workers(worker, world_size, str(folder), *args); a failed run as the ExerciseError that
    shows its ranks' output (`run` says what ran, as in "the 3-process run {run} failed")."""
    try:
        spawn_workers(worker, world_size, str(folder), *args, start_method=fast_start_method(), timeout_s=RUN_LIMIT_S)
    except Exception as e:
        raise ExerciseError(f"the {world_size}-process run {run} failed ({type(e).__name__}: "
                            f"{str(e).strip().splitlines()[-1]}); its ranks' output:\n{rank_log_tails(folder)}") from e


def grade_on_ranks(path: Path, worker: Callable, mistakes: Callable[[int, list[dict]], list[str]],
                   world_sizes: tuple[int, ...], run: str) -> None:
    """The learner's file at `path` graded on real groups of each size: a stub still blank raises NotDone before any
    process starts; each size's run is `worker(folder, str(path))` on every rank, each rank saving rank-R.json (as
    save_and_leave does), and the first size whose results `mistakes(n, results)` finds wrong raises ExerciseError
    naming them."""
    for line in path.read_text().splitlines():
        if what := blank.stub_in(line):
            raise NotDone(what)
    for n in world_sizes:
        with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as folder:
            spawn_ranks(worker, n, Path(folder), str(path), run=run)
            results = [json.loads((Path(folder) / f"rank-{r}.json").read_text()) for r in range(n)]
        if found := mistakes(n, results):
            raise ExerciseError("\n".join(found))


def raised_at(e: BaseException, path: str) -> str:
    """`Type: message's first line at FILE:LINE`, the line the learner's file at `path` last had in its traceback."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    where = f" at {Path(path).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}{where}"
