"""The negative controls on a real --quick run, and the findings records on made-up numbers."""

from pathlib import Path

import pytest

from helpers import check_findings, check_provenance, run_module
from minitrain.measure.controls import CASES, LOSS_TOLERANCE, MEASUREMENT, findings, learning_verdict, live_checks

MODULE = "minitrain.measure.controls"
FIELDS = {"measurement", "steps", "quick", "drift", "final_drift", "ddp_drift_exactly_zero",
          "noop_equals_no_sync", "learning", "pairs", "commands", "runtime_s", "findings", "provenance"}
NAMES = ["ddp_max_drift", "no_sync_final_drift", "val_loss_2proc_minus_1proc", "accuracy_2proc_minus_1proc"]


@pytest.fixture(scope="module")
def quick_run(corpus_dir, tmp_path_factory) -> Path:
    """`python -m minitrain.measure.controls --quick` into a temporary folder, on the session's corpus."""
    out = tmp_path_factory.mktemp("controls")
    run_module(MODULE, "--quick", "--out", str(out), "--corpus-dir", str(corpus_dir))
    return out


def test_result_files_and_fields(quick_run):
    results = MEASUREMENT.load(quick_run)
    assert FIELDS <= results.keys()
    assert results["measurement"] == "controls" and results["quick"] is True
    prov = check_provenance(results, MODULE, "corpus_sha256")
    assert "--quick" in prov.command
    assert set(results["drift"]) == set(CASES)
    assert {"1proc", "2proc", "before"} <= results["learning"].keys()
    for run in ("1proc", "2proc"):
        assert len(results["learning"][run]["loss"]) == results["steps"]
        assert 0 <= results["learning"][run]["accuracy"] <= 1
    assert results["findings"] == findings(results)
    assert (quick_run / "controls_drift.png").stat().st_size > 0
    assert (quick_run / "controls_learning.png").stat().st_size > 0
    assert not list(quick_run.glob("*.tmp"))


def test_findings_hold_the_runs_numbers(quick_run):
    results = MEASUREMENT.load(quick_run)
    one, two = results["learning"]["1proc"], results["learning"]["2proc"]
    check_findings(results["findings"], {
        "ddp_max_drift": max(results["drift"]["ddp"]),
        "no_sync_final_drift": results["final_drift"]["no-sync"],
        "val_loss_2proc_minus_1proc": two["val_loss"] - one["val_loss"],
        "accuracy_2proc_minus_1proc": two["accuracy"] - one["accuracy"]})


def test_ddp_drift_is_exactly_zero_at_every_step(quick_run):
    results = MEASUREMENT.load(quick_run)
    assert len(results["drift"]["ddp"]) == results["steps"]
    assert all(d == 0.0 for d in results["drift"]["ddp"])
    assert results["ddp_drift_exactly_zero"]


@pytest.mark.parametrize("case", ["no-sync", "noop"])
def test_without_allreduce_the_ranks_drift_apart(quick_run, case):
    drift = MEASUREMENT.load(quick_run)["drift"][case]
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


def test_findings_when_ddp_learns_as_well():
    results = made_up(1.51, 0.81)
    assert learning_verdict(results) == "same"
    found = check_findings(findings(results), dict(zip(NAMES, [0.0, 0.12, 0.01, 0.01])))
    assert "over 300 steps" in found["ddp_max_drift"].meaning
    assert "exactly 0 at every step" in found["ddp_max_drift"].meaning
    assert "after 300 steps under no_sync()" in found["no_sync_final_drift"].meaning
    assert "no-op comm hook: identical" in found["no_sync_final_drift"].meaning
    loss = found["val_loss_2proc_minus_1proc"]
    assert "1.510 against 1.500" in loss.meaning and "learning: same" in loss.meaning
    assert f"losses within {LOSS_TOLERANCE} nats" in loss.meaning and loss.unit == "nats"
    assert "0.810 against 0.800 on 1000 pairs" in found["accuracy_2proc_minus_1proc"].meaning


def test_findings_when_ddp_learns_worse_or_drifts():
    results = made_up(1.80, 0.70)
    results["drift"]["ddp"] = [0.0, 0.0, 3e-7]
    results["ddp_drift_exactly_zero"] = False
    results["final_drift"]["noop"], results["noop_equals_no_sync"] = 0.11, False
    assert learning_verdict(results) == "worse"
    found = check_findings(findings(results), dict(zip(NAMES, [3e-7, 0.12, 0.30, -0.10])))
    assert "exactly 0" not in found["ddp_max_drift"].meaning
    assert "identical" not in found["no_sync_final_drift"].meaning
    assert "learning: worse" in found["val_loss_2proc_minus_1proc"].meaning


@pytest.mark.parametrize("val_2proc, acc_2proc, verdict", [
    (1.51, 0.81, "same"),  # within the loss tolerance and two standard errors of the difference
    (1.51, 0.83, "same"),  # 3 points up: beyond 2 standard errors of one accuracy (2.4), not of the difference
    (1.51, 0.86, "better"),  # accuracy 6 points up, 2 standard errors of the difference are 3.4
    (1.80, 0.80, "worse"),  # loss 0.3 nats up, accuracy the same
    (1.40, 0.70, "different"),  # loss better, accuracy worse
])
def test_learning_verdict(val_2proc, acc_2proc, verdict):
    results = made_up(val_2proc, acc_2proc)
    assert learning_verdict(results) == verdict
    assert f"learning: {verdict} " in findings(results)[2].meaning


def test_live_checks_hold_and_name_a_broken_fact(quick_run):
    drift = MEASUREMENT.load(quick_run)["drift"]
    assert all(live_checks(drift).values())  # what notebook 09's live run asserts
    flat = live_checks(drift | {"no-sync": [drift["no-sync"][0]] * 2})
    assert flat == {"live DDP run, drift exactly 0 at every step": True,
                    "live no_sync() run, drift above 0 and growing": False}


def test_the_takeaway_and_the_drift_sentence_follow_the_results():
    """The notebook's sentences carry controls.json's numbers; the learning verdict's words follow the data."""
    import copy

    from minitrain.measure import controls

    results = controls.MEASUREMENT.load()
    assert f"{results['final_drift']['no-sync']:.1e}" in controls.takeaway(results)
    assert f"{results['drift']['no-sync'][-1]:.1e} after {results['steps']}" in controls.drift_growth(results)
    worse = copy.deepcopy(results)
    worse["learning"]["2proc"]["val_loss"] = results["learning"]["1proc"]["val_loss"] + 2 * LOSS_TOLERANCE
    assert "2 processes learned worse" in controls.takeaway(worse)
    assert "a setting, not a noise estimate" in controls.takeaway(results)
    spread = {"seed_spread": {"val_loss": 0.02, "accuracy": 0.016, "runs": 4}}
    assert "about 2.5 seed spreads of validation loss, 0.0200 nats over notebook 12's 4 plain runs" in (
        controls.takeaway(results, spread))
    faster = copy.deepcopy(results)  # the drift at the end twice the steady pace: faster in the second half
    faster["drift"]["no-sync"][-1] = 4 * faster["drift"]["no-sync"][results["steps"] // 2 - 1]
    assert "faster in the second half" in controls.drift_growth(faster)
