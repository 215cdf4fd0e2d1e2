"""DDP's arithmetic by hand matches a real 2-rank train.py run bit for bit (test_graders.py: it names a loop's mistakes)."""

import torch

from helpers import EXPERIMENT_STEPS
from minitrain.lab.grading.by_hand import ddp_by_hand, judge_run
from minitrain.lab.reporting.runs import run_dir_in


def test_train_py_is_ddps_arithmetic_bit_for_bit(experiment_run, corpus_dir):
    """The sheet's 2-process run of the session's experiment (conftest.py), held to the arithmetic by hand."""
    states = [torch.load(run_dir_in(experiment_run, 2) / f"state-rank-{r}.pt", weights_only=True) for r in range(2)]
    assert judge_run(states, EXPERIMENT_STEPS, corpus_dir) == ""
    untrained = ddp_by_hand(0, corpus_dir)
    assert any(not torch.equal(untrained[k], v) for k, v in states[0].items())  # the steps changed it
