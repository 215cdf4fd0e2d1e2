import os
import re
from pathlib import Path

import pytest
import torch

from minitrain.corpus import generate_corpus
from minitrain.launch.warm import WARM
from minitrain.paths import EXPERIMENT_DIR, REPO, STUDENT_EDITION

if STUDENT_EDITION:  # a TODO still blank is skipped, naming it (minitrain.lab.editions.blank_todos)
    from minitrain.lab.editions.blank_todos import (pytest_runtest_logreport, pytest_runtest_makereport,  # noqa: F401
                                           pytest_runtest_setup, pytest_terminal_summary)

# `make test` runs three pytest workers on a two-core machine, beside the runs they start: torch's
# computations in this process take one thread each, as torchrun gives each of two workers. Child
# processes (runs, kernels) are not affected: they read OMP_NUM_THREADS, which stays as it was.
torch.set_num_threads(1)

# The lab's runs the tests start (the experiment, the control runs, the measurements' workers; notebooks' kernels
# inherit it) fork their ranks from a process that has imported torch instead of starting the lab's torchrun: about
# 5 s of CPU less a run. The launcher itself is tested end to end in tests/faults, with torchrun_command; there its
# agent forks each worker from the launcher (minitrain.launch.torchrun._torchrun), but in the runs that check a
# worker's exit or how its end is reported (NEW_INTERPRETERS in tests/faults/harness.py).
os.environ[WARM] = "1"

# `make test` (pytest-xdist, --dist loadfile --no-loadscope-reorder) hands whole files to its three
# workers in the order collected: the files that take longest go first, by the seconds docs/test-budget.md measured
# (a group of SAME_WORKER below by its files' sum), so that no long file starts last while the others have nothing
# left; a file without a row goes last, and files of equal seconds keep their order.
BUDGET = REPO / "docs" / "test-budget.md"
BUDGET_ROW = re.compile(r"^\| `([^`]+)` \| (\d+) \| (\d+) \|$", re.MULTILINE)  # | `file` | measured | budget |


def read_budget() -> dict[str, tuple[int, int]]:
    """docs/test-budget.md's rows: file -> (seconds measured, seconds it may take)."""
    return {path: (int(measured), int(budget)) for path, measured, budget in BUDGET_ROW.findall(BUDGET.read_text())}


# Files that read one session fixture's runs go to one worker, as one unit (its files in collection
# order), so that the runs are made once: the experiment (tests/minitrain/conftest.py) and the restart
# measurement's quick runs (`restart_runs` below, read by test_restart_measure.py and tests/faults/test_restart.py).
SAME_WORKER = {
    "tests/minitrain/test_check.py": "the experiment", "tests/minitrain/test_repeats.py": "the experiment",
    "tests/minitrain/test_by_hand.py": "the experiment", "tests/minitrain/test_reuse.py": "the experiment",
    "tests/minitrain/test_restart_measure.py": "the restart runs", "tests/faults/test_restart.py": "the restart runs",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the files of SAME_WORKER grouped."""
    from xdist.scheduler import LoadFileScheduling

    if config.getvalue("dist") != "loadfile":
        return None

    class SharedRunScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return SAME_WORKER.get(file, file)

    return SharedRunScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unit_seconds: dict[str, int] = {}
    for path, (measured, _) in read_budget().items():
        unit = SAME_WORKER.get(path, path)
        unit_seconds[unit] = unit_seconds.get(unit, 0) + measured

    def seconds(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return unit_seconds.get(SAME_WORKER.get(path, path), -1)
    items.sort(key=seconds, reverse=True)  # stable: equal seconds (a file's tests) keep their order


@pytest.fixture(scope="session")
def budget() -> dict[str, tuple[int, int]]:
    """docs/test-budget.md's rows (read_budget)."""
    return read_budget()


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """The lab's corpus, generated once per test session into a temporary folder."""
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out)
    return out


@pytest.fixture
def committed_run() -> Path:
    """The sheet's 2-process run in experiments/35-ddp-cpu/: the reference's committed run, or in the student
    edition the learner's own, skipped until `make lab` has made it."""
    if STUDENT_EDITION and not (EXPERIMENT_DIR / "run.json").is_file():
        pytest.skip("needs your run in experiments/35-ddp-cpu/: make lab makes it")
    return EXPERIMENT_DIR


@pytest.fixture(scope="session")
def restart_runs(tmp_path_factory, corpus_dir) -> tuple[Path, dict]:
    """The restart measurement's quick runs (uninterrupted, one fault, two faults, resumes done wrong)
    and its results, once per session: test_restart_measure.py checks them, tests/faults/test_restart.py
    holds its own restarts to the uninterrupted run."""
    from minitrain.measure.restart import run

    out = tmp_path_factory.mktemp("restart")
    return out, run(out, quick=True, corpus_dir=corpus_dir, echo=lambda _: None)
