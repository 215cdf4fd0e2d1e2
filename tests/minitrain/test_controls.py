"""The negative controls on a real --quick run, and the findings sentence on made-up numbers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minitrain.controls import CASES, findings_sentence

FIELDS = {"steps", "drift", "final_drift", "ddp_drift_exactly_zero", "noop_equals_no_sync", "learning",
          "pairs", "commands", "runtime_s", "torch", "corpus_sha256", "date", "findings"}


@pytest.fixture(scope="module")
def quick_run(corpus_dir, tmp_path_factory) -> Path:
    """`python -m minitrain.controls --quick` into a temporary folder, on the session's corpus."""
    out = tmp_path_factory.mktemp("controls")
    command = [sys.executable, "-m", "minitrain.controls", "--quick", "--out", str(out),
               "--corpus-dir", str(corpus_dir)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_result_files_and_fields(quick_run):
    results = json.loads((quick_run / "controls.json").read_text())
    assert FIELDS <= results.keys()
    assert set(results["drift"]) == set(CASES)
    assert {"1proc", "2proc", "before"} <= results["learning"].keys()
    for run in ("1proc", "2proc"):
        assert len(results["learning"][run]["loss"]) == results["steps"]
        assert 0 <= results["learning"][run]["accuracy"] <= 1
    assert results["findings"] == findings_sentence(results)
    assert (quick_run / "controls_drift.png").stat().st_size > 0
    assert (quick_run / "controls_learning.png").stat().st_size > 0
    assert not list(quick_run.glob("*.tmp"))


def test_ddp_drift_is_exactly_zero_at_every_step(quick_run):
    results = json.loads((quick_run / "controls.json").read_text())
    assert len(results["drift"]["ddp"]) == results["steps"]
    assert all(d == 0.0 for d in results["drift"]["ddp"])
    assert results["ddp_drift_exactly_zero"]


@pytest.mark.parametrize("case", ["no-sync", "noop"])
def test_without_allreduce_the_ranks_drift_apart(quick_run, case):
    drift = json.loads((quick_run / "controls.json").read_text())["drift"][case]
    assert all(d > 0 for d in drift)
    assert drift[-1] > drift[0]  # grows from the first step to the last


def made_up(val_2proc: float, acc_2proc: float) -> dict:
    """Results shaped like controls.json, with round numbers."""
    return {"steps": 300, "global_batch": 32, "block_size": 64, "pairs": 1000,
            "drift": {"ddp": [0.0] * 3, "no-sync": [6e-4, 1e-2, 0.12], "noop": [6e-4, 1e-2, 0.12]},
            "final_drift": {"ddp": 0.0, "no-sync": 0.12, "noop": 0.12},
            "ddp_drift_exactly_zero": True, "noop_equals_no_sync": True,
            "learning": {"before": {"val_loss": 6.12, "accuracy": 0.541},
                         "1proc": {"val_loss": 1.50, "accuracy": 0.80},
                         "2proc": {"val_loss": val_2proc, "accuracy": acc_2proc}}}


def test_findings_sentence_when_ddp_learns_as_well():
    text = findings_sentence(made_up(1.51, 0.81))
    assert "grew from 6.0e-04 after the first step to 1.2e-01 after 300 steps" in text
    assert "identically with DDP's no-op comm hook" in text
    assert "stayed exactly 0 at every step" in text
    assert "learned grammar as well as 1 process" in text
    assert "validation loss 1.51 against 1.50 (6.12 before training)" in text
    assert "minimal-pair accuracy 0.810 against 0.800 (0.541 before, 1000 pairs)" in text


def test_findings_sentence_when_ddp_learns_worse_or_drifts():
    results = made_up(1.80, 0.70)
    results["drift"]["ddp"] = [0.0, 0.0, 3e-7]
    results["ddp_drift_exactly_zero"] = False
    results["final_drift"]["noop"], results["noop_equals_no_sync"] = 0.11, False
    text = findings_sentence(results)
    assert "it reached 3.0e-07" in text
    assert "1.1e-01 with DDP's no-op comm hook" in text
    assert "learned worse than 1 process" in text
    assert "as well as" not in text


def test_findings_sentence_when_loss_and_accuracy_disagree():
    assert "learned differently from 1 process" in findings_sentence(made_up(1.40, 0.70))
    assert "learned better than 1 process" in findings_sentence(made_up(1.51, 0.86))
