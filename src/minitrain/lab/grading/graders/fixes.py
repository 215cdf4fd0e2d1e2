"""Notebook 16's fixes (fix16a-c), graded by what they do: the learner's fixed script must run to its end on 2 real
ranks and train as the broken script does in one process, where no rank can differ from another: its checkpoint
at the same step, with the same loss and weights (within TOLERANCE), on the script's own data and on another seed's."""

import functools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from minitrain.diagnose.inrank import OUT, TOOL
from minitrain.hang_report import named_hang, named_mismatch
from minitrain.lab.grading.graders.running import ExerciseError, rank_log_tails, rank_logs, script_rank
from minitrain.lab.todos.blank import TodoNotDone
from minitrain.lab.todos.registry import TODOS, Todo
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.paths import REPO
from minitrain.todo import NotDone

SEEDS = (None, "8")  # the script's own data (SEED unset), then another's: a fix that names a step or a count fails it
COLLECTIVE_TIMEOUT_S = 10.0  # a fixed script never waits this long in a collective
LIMIT_S = 90.0  # a run still going then is stopped: a fixed script ends in seconds
TOLERANCE = 1e-3  # |weights - one process's| / |one process's|: the reference's fixes, summing in another order, 1e-7 to 3e-5


@dataclass(frozen=True)
class Trained:
    """What a run of an exercise script left in its checkpoint: steps, loss, weights."""
    steps: int
    loss: float
    weights: dict[str, torch.Tensor]


def trained(script: Path, nproc: int, seed: str | None, label: str = "", limit_s: float = LIMIT_S) -> Trained:
    """`script` run on `nproc` ranks (warm: forked, with torchrun's variables), SEED=`seed`, the lab's hang report on;
    its checkpoint read. `label` names the script in an error."""
    with tempfile.TemporaryDirectory(prefix="minitrain-fix-") as tmp:
        out, logs = Path(tmp) / "out", Path(tmp) / "logs"
        out.mkdir()
        logs.mkdir()
        env = {TOOL: "hang_report", OUT: str(out), "MINITRAIN_COLLECTIVE_TIMEOUT": f"{COLLECTIVE_TIMEOUT_S:g}",
               "OMP_NUM_THREADS": "1", **({"SEED": seed} if seed else {})}
        run = f"{label or script.name} on {nproc} rank{'s' if nproc > 1 else ''}" + \
            (f" with SEED={seed} (other data)" if seed else "")
        try:
            spawn_workers(script_rank, nproc, str(logs), str(script), [], start_method=fast_start_method(),
                          timeout_s=limit_s, env=env)
        except TimeoutError as e:
            raise ExerciseError(f"{run} did not end within {limit_s:g} s and was stopped: {_why(logs)}") from e
        except Exception as e:  # a rank raised, or exited non-zero
            raise ExerciseError(f"{run} failed: {_why(logs)}") from e
        try:
            checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
            return Trained(int(checkpoint["step"]), float(checkpoint["loss"]), checkpoint["model"])
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ExerciseError(f"{run} ended without the checkpoint it writes (checkpoint.pt with its model, step "
                                f"and loss: keep its save_checkpoint): {type(e).__name__}: {e}") from e


def _why(logs: Path) -> str:
    """What the ranks' logs say went wrong: the hang report's line, else each rank's last lines."""
    said = rank_logs(logs)
    return named_hang(said) or named_mismatch(said) or f"its ranks' last lines:\n{rank_log_tails(logs)}"


@functools.cache  # once per process and seed: the tests and the notebook's cell grade several fixes of a script
def _clean(text: str, name: str, seed: str | None) -> Trained:
    with tempfile.TemporaryDirectory(prefix="minitrain-clean-") as tmp:
        script = Path(tmp) / name
        script.write_text(text)
        return trained(script, 1, seed)


def clean(script: Path, seed: str | None) -> Trained:
    """The broken `script` run in one process: how it trains when no rank can differ from another."""
    return _clean(script.read_text(), script.name, seed)


def difference(clean: Trained, fixed: Trained) -> float:
    """|fixed's weights - clean's| / |clean's|, over every weight (inf: other names or shapes, or not finite)."""
    if clean.weights.keys() != fixed.weights.keys() or any(
            clean.weights[k].shape != fixed.weights[k].shape for k in clean.weights):
        return math.inf
    apart = sum(float((fixed.weights[k].double() - clean.weights[k].double()).square().sum()) for k in clean.weights)
    size = sum(float(w.double().square().sum()) for w in clean.weights.values())
    ratio = math.sqrt(apart / size)
    return ratio if math.isfinite(ratio) else math.inf


def fix_mistake(clean: Trained, fixed: Trained) -> str | None:
    """How the fixed run trained otherwise than one process did; None when it trained the same."""
    if fixed.steps != clean.steps:
        return f"its checkpoint is at step {fixed.steps}; the script's in one process is at step {clean.steps}"
    if not math.isfinite(fixed.loss) or abs(fixed.loss - clean.loss) > TOLERANCE * abs(clean.loss):
        return f"its checkpoint's loss is {fixed.loss:.6g}; the script's in one process is {clean.loss:.6g}"
    if (apart := difference(clean, fixed)) > TOLERANCE:
        return (f"its final weights differ from one process's by {apart:.1e} of their size (within {TOLERANCE:g} "
                "passes): some step trained on other data, or skipped, on some rank")
    return None


def _blank(repo: Path, todo: Todo) -> str | None:
    """Why the fix in `repo` is still blank (missing, or the broken script unchanged), None when it is not."""
    broken, fixed = repo / todo.starts_as, repo / todo.file
    if not fixed.is_file():
        return "missing"
    return "unchanged" if fixed.read_bytes() == broken.read_bytes() else None


def grade_fix(repo: Path, todo: Todo) -> str:
    """The learner's fixed copy (todo.file) of a broken script (todo.starts_as): blank while missing or unchanged;
    then run on 2 ranks beside the script in one process, for each of SEEDS."""
    broken, fixed = repo / todo.starts_as, repo / todo.file
    if state := _blank(repo, todo):
        raise NotDone(f"the fix of {broken.name} ({todo.file} is {state})")
    label = f"your fixed/{fixed.name}"
    for seed in SEEDS:
        mistake = fix_mistake(clean(broken, seed), trained(fixed, 2, seed, label))
        if mistake:
            data = f"with SEED={seed} (other data)" if seed else "on its own data"
            raise ExerciseError(f"{label} ran to its end on 2 ranks {data}, but {mistake}")
    return (f"{broken.name} fixed: on 2 ranks it runs to its end and trains as it does in one process (steps, loss, "
            f"weights within {TOLERANCE:g}), on its own data and with SEED={SEEDS[1]}")


def grade_fixes(repo: Path = REPO) -> str:
    """Notebook 16's cell: each fix graded in turn (a line each); the first still blank stops, in one line, before
    its processes start; the wrong ones raise together at the end."""
    verdicts, wrong = [], []
    for todo in (t for t in TODOS if t.grader == "fixes:grade_fix"):
        if state := _blank(repo, todo):
            if verdicts or wrong:
                print("\n".join(verdicts + wrong))
            raise TodoNotDone(f"the fix of {Path(todo.starts_as).name}", f"{todo.file} ({state}: edit the copy there)")
        try:
            verdicts.append(grade_fix(repo, todo))
        except ExerciseError as e:
            wrong.append(str(e))
    if wrong:
        raise ExerciseError("\n".join(wrong + verdicts))
    return "\n".join(verdicts)
