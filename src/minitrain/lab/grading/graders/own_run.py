"""F and G: the learner's own run, graded by the checker's stop conditions on their experiment folder."""

from pathlib import Path

from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.reporting.stop_conditions import check_folder
from minitrain.lab.todos.registry import EXPERIMENT, RUN_FILES, Todo
from minitrain.todo import NotDone


def _stop_conditions(repo: Path, names: tuple[str, ...]) -> str:
    """The checker's rows `names` on the learner's run: their details, or ExerciseError naming those that failed."""
    folder = repo / EXPERIMENT
    if not any((folder / name).exists() for name in RUN_FILES):
        raise NotDone(f"no run in {EXPERIMENT}/ (run `make lab`)")
    results = [r for r in check_folder(folder, run_tests=False) if r.name in names]
    failed = [f"{r.name}: {r.detail}" for r in results if not r.passed]
    if failed:
        raise ExerciseError("; ".join(failed))
    return "; ".join(f"{r.name}: {r.detail}" for r in results)


def grade_f(repo: Path, todo: Todo) -> str:
    """Stop conditions 1-3: the run's files, its equal weights, its all-reduce timing."""
    return _stop_conditions(repo, ("files", "equivalence", "allreduce timing"))


def grade_g(repo: Path, todo: Todo) -> str:
    """Stop condition 4: the paragraph in the run's manifest."""
    return _stop_conditions(repo, ("lesson notes",))
