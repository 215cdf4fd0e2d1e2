from pathlib import Path

import pytest

from helpers import EXPERIMENT_REPEATS, EXPERIMENT_STEPS, EXPERIMENT_WARMUP


@pytest.fixture(scope="session")
def student_tree(tmp_path_factory) -> Path:
    """`make student`'s tree, built once per session; tests copy it before they change it."""
    from minitrain.lab.editions import student_edition  # here, not at the top: its nbformat import is a second of CPU in every session

    out = tmp_path_factory.mktemp("edition") / "student"
    student_edition.write_student_edition(out)
    return out


@pytest.fixture(scope="session")
def experiment_run(corpus_dir, tmp_path_factory) -> Path:
    """One real experiment (the sheet's 1- and 2-process runs, then 2 repeats of each, alternating; 12
    steps, 4 warm-up) into a temporary folder, for every file that reads one: test_check.py,
    test_repeats.py, test_by_hand.py and test_reuse.py (tests/conftest.py sends them to one worker). Read-only:
    a test that changes it works on a copy."""
    from minitrain.lab.running import whole_experiment

    out = tmp_path_factory.mktemp("experiment")
    # in this process, its ranks forked from this worker's warm server: no interpreter and server of its own; its
    # command line is tested in tests/faults/test_bad_arguments.py
    whole_experiment.main(["--out", str(out), "--steps", str(EXPERIMENT_STEPS), "--warmup", str(EXPERIMENT_WARMUP),
                           "--repeats", str(EXPERIMENT_REPEATS),
                           "--corpus-dir", str(corpus_dir)])  # the session's corpus, not the repo's
    return out
