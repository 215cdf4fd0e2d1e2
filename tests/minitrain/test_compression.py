"""The compression module: one real quick 2-process run (fp16 halves the socket bytes, PowerSGD
sends what its P and Q hold, the ranks stay bitwise equal, gloo's float16 sum is exact), the results
file and findings; PowerSGD's compression rule and the byte theory on hand-made shapes. No timing
assertions: this machine's speed is not under test."""

import copy
import json
import sys

import pytest

from helpers import check_findings, check_provenance
from minitrain.lab.reporting.results_file import plain
from minitrain.measure import compression
from minitrain.measure.compression import Plan, checks, run
from minitrain.measure.compression_ranks import powersgd_matrices, theory

QUICK = Plan.quick()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("compression")
    return out, run(out, quick=True, corpus_dir=corpus_dir)


def rows(results: dict) -> dict[str, dict]:
    return {v["name"]: v for v in results["variants"]}


def test_every_quick_variant_ran(quick_run):
    _, results = quick_run
    assert [v["name"] for v in results["variants"]] == list(QUICK.variants)
    assert [c["seed"] for c in results["seed_controls"]] and results["seed_spread"]["runs"] == 1 + QUICK.seed_controls


def test_fp16_halves_the_bytes_on_the_sockets(quick_run):
    _, results = quick_run
    fp16, plain = rows(results)["fp16"], rows(results)["plain"]
    assert fp16["theory"]["bytes"] * 2 == plain["theory"]["bytes"] == results["config"]["gradient_bytes"]
    if not sys.platform.startswith("linux"):
        assert fp16["sent"] is None and "not available" in results["bytes_source"]
        return
    assert 0.49 < fp16["sent_over_plain"] < 0.52  # gloo's message headers add a little to both
    assert 1.0 <= fp16["sent_over_theory"] < 1.01 and 1.0 <= plain["sent_over_theory"] < 1.01


def test_powersgd_sends_its_p_and_q_after_a_plain_warmup(quick_run):
    _, results = quick_run
    psgd, plain = rows(results)["powersgd-1"], rows(results)["plain"]
    counted, t = psgd["powersgd_counted"], psgd["theory"]
    # the rule re-derived from the shapes is what the hook's own state holds and counted
    assert (counted["p_numel"], counted["q_numel"]) == (t["p"], t["q"])
    assert counted["numel_after_per_step"] == t["p"] + t["q"] + t["uncompressed"]
    assert counted["numel_before_per_step"] == results["config"]["model_params"]
    if sys.platform.startswith("linux"):
        assert psgd["sent_over_plain"] < 0.1  # rank 1: a few percent of the gradients
        assert 1.0 <= psgd["sent_over_theory"] < 1.2  # three all-reduces' headers on a small message
        # the warm-up is the plain all-reduce: the same bytes a step as plain's warm-up
        assert psgd["warmup_sent"] == pytest.approx(plain["warmup_sent"], rel=0.01)


def test_ranks_stay_bitwise_equal_with_every_hook(quick_run):
    _, results = quick_run
    for v in results["variants"]:
        assert v["ranks_bitwise_equal"] and v["ranks_max_abs_diff"] == 0.0, v["name"]


def test_gloo_sums_half_precision_exactly(quick_run):
    """pytorch/pytorch#152300: gloo's float16 all-reduce had elements off the exact sum; not in this torch."""
    _, results = quick_run
    check = results["half_allreduce_check"]
    assert check["elements"] == QUICK.check_elements
    assert check["dtypes"]["float16"]["overflowed_to_inf"] > 0  # the reproducer reaches float16's limits
    assert {d: c["mismatches"] for d, c in check["dtypes"].items()} == {"float16": 0, "bfloat16": 0}


def test_results_on_disk(quick_run):
    out, results = quick_run
    assert json.loads((out / "compression.json").read_text()) == json.loads(json.dumps(plain(results)))
    assert results["measurement"] == "compression" and results["quick"] is True
    assert "--quick" in check_provenance(results, "minitrain.measure.compression", "corpus_sha256").command
    assert (out / "compression.png").stat().st_size > 0
    assert not list(out.glob(".*"))  # no temporary files left behind


def test_findings_hold_the_runs_numbers(quick_run):
    _, results = quick_run
    by = rows(results)
    shifts = [v["val_loss_shift_in_spreads"] for v in results["variants"][1:]]
    found = check_findings(results["findings"], {
        "fp16_bytes_over_plain": by["fp16"]["sent_over_plain"],
        "powersgd_rank1_bytes_over_plain": by["powersgd-1"]["sent_over_plain"],
        "largest_val_loss_shift": max(shifts, key=abs),
        "variants_with_bitwise_equal_ranks": len(QUICK.variants),
        "gloo_fp16_allreduce_mismatches": 0})
    assert f"of {len(QUICK.variants)} variants" == found["variants_with_bitwise_equal_ranks"].unit


def test_the_live_runs_checks_hold_and_name_a_broken_fact(quick_run):
    _, results = quick_run
    assert checks(results) and all(checks(results).values())  # what notebook 12's live run asserts
    broken = copy.deepcopy(results)
    broken["variants"][1]["ranks_bitwise_equal"] = False
    assert checks(broken)["both ranks bitwise equal with every hook"] is False


def test_powersgd_compresses_only_matrices_that_shrink_enough():
    shapes = {"bias": [96], "square": [96, 96], "small": [4, 4], "conv": [8, 3, 5, 5], "thin": [2, 50]}
    by = {r["name"]: r for r in powersgd_matrices(shapes, rank=4)}
    assert not by["bias"]["compressed"] and by["bias"]["uncompressed"] == 96  # a vector is 96 x 1
    assert by["square"]["compressed"] and (by["square"]["p"], by["square"]["q"]) == (96 * 4, 96 * 4)
    assert not by["small"]["compressed"]  # (4 + 4) x 4 x 2 >= 16
    assert (by["conv"]["n"], by["conv"]["m"]) == (8, 75) and not by["conv"]["compressed"]  # (8+75)x4x2 > 600
    assert by["thin"]["rank"] == 2 and not by["thin"]["compressed"]  # rank capped at min(n, m)
    assert powersgd_matrices(shapes, rank=1, min_rate=1)[2]["compressed"]  # (4 + 4) x 1 < 16


def test_byte_theory_per_variant():
    shapes = {"w": [96, 96], "b": [96]}
    values = 96 * 96 + 96
    assert theory("plain", shapes, 2)["bytes"] == 4 * values
    assert theory("plain", shapes, 4)["bytes"] == 1.5 * 4 * values  # the ring: 2(n-1)/n
    assert theory("bf16", shapes, 2)["bytes"] == 2 * values
    psgd = theory("powersgd-2", shapes, 2)
    assert (psgd["p"], psgd["q"], psgd["uncompressed"], psgd["allreduces_per_bucket"]) == (192, 192, 96, 3)
    assert psgd["bytes"] == 4 * (192 + 192 + 96)


def test_the_takeaway_follows_the_results_and_times_nothing():
    """The committed run's sentences carry its numbers; one bucket on loopback is not timed, so no step verdict."""
    results = compression.MEASUREMENT.load()
    said = compression.takeaway(results)
    fp16 = rows(results)["fp16"]
    assert f"fp16 {fp16['sent_over_plain']:.3f} ({fp16['theory']['over_plain']:.3f})" in said
    assert " ms" not in said and "faster" not in said
    assert not any(f.name.endswith("_step_over_plain") for f in compression.findings(results))
    unequal = copy.deepcopy(results)
    unequal["variants"][1]["ranks_bitwise_equal"] = False
    assert f"{len(results['variants']) - 1} of {len(results['variants'])} variants" in compression.takeaway(unequal)


def test_the_figure_and_the_takeaway_judge_by_one_band():
    """The grey band is plain's value ± one seed spread, and the takeaway's "within one seed spread" is inside it:
    on the committed run and on a copy whose plain run moved, so that fp16 leaves the band."""
    results = compression.MEASUREMENT.load()
    plain, spread = results["variants"][0]["val_loss"], results["seed_spread"]["val_loss"]
    assert compression.seed_band(results, "val_loss") == (plain - spread, plain + spread)
    inside = [v["name"] for v in results["variants"][1:] if abs(v["val_loss"] - plain) <= spread]
    assert f"within one seed spread: {', '.join(inside)};" in compression.takeaway(results)
    moved = copy.deepcopy(results)
    moved["variants"][0]["val_loss"] = rows(results)["fp16"]["val_loss"] + 2 * spread  # fp16 now two spreads below plain
    low, high = compression.seed_band(moved, "val_loss")
    assert not low <= rows(results)["fp16"]["val_loss"] <= high
    said = compression.takeaway(moved)
    assert "fp16" in said.split("beyond it:")[1] and "fp16" not in said.split("beyond it:")[0].split("spread:")[1]
    none = copy.deepcopy(results)
    none["seed_spread"]["val_loss"] = None
    assert compression.seed_band(none, "val_loss") is None and "seed spread" not in compression.takeaway(none)
