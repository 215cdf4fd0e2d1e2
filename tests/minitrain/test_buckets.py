"""The bucket sweep: one real quick 2-process run (bucket counts per cap, the ranks bitwise equal, one
cap's traces), DDP's closing rule on hand-made sizes, the per-bucket overlap rows on hand-made
events, and the takeaway's verdicts on made-up numbers. No timing assertions: this machine's speed
is not under test."""

import copy
import gzip
import json
from dataclasses import asdict

import pytest

from helpers import PROVENANCE, check_findings, check_provenance
from minitrain.lab.reporting.results_file import Provenance, plain
from minitrain.measure.buckets import (TRACE_CAP, TRACE_NAME, Plan, bucket_partition, checks,
                                       findings, label, run, takeaway)
from minitrain.measure.buckets_ranks import MiB, ddp_caps
from minitrain.measure.trace import ALLREDUCE, BACKWARD_OP, STEP, overlap_table, overlapped_share
from minitrain.train import build_model_for_corpus

QUICK = Plan.quick()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("buckets")
    lines = []
    return out, run(out, quick=True, corpus_dir=corpus_dir, echo=lines.append)


def test_bucket_counts_for_each_cap(quick_run, corpus_dir):
    _, results = quick_run
    caps = {c["cap"]: c for c in results["caps"]}
    assert list(caps) == [label(c) for c in QUICK.caps]
    model, _ = build_model_for_corpus(corpus_dir, results["config"]["block_size"])
    sizes = {name: p.numel() * p.element_size() for name, p in model.named_parameters()}
    # the default: 1 MiB for the first bucket, and MiniGPT's gradients reach it only with the last tensor
    assert sum(sizes.values()) == results["gradient_bytes"] > MiB
    default = caps["default"]
    assert default["count"] == 1 and (default["first_cap_bytes"], default["cap_bytes"]) == (MiB, 25 * MiB)
    traced = caps[label(TRACE_CAP)]
    assert (traced["first_cap_bytes"], traced["cap_bytes"]) == ddp_caps(TRACE_CAP) == (int(TRACE_CAP * MiB),) * 2
    assert traced["count"] > 1
    for cap in caps.values():
        names = [name for b in cap["buckets"] for name in b["params"]]
        assert sorted(names) == sorted(sizes)  # every parameter once
        assert [b["bytes"] for b in cap["buckets"]] == [sum(sizes[n] for n in b["params"]) for b in cap["buckets"]]
        # DDP's closing rule, applied to the order backward produced the gradients, gives DDP's buckets
        assert bucket_partition([sizes[n] for n in names], cap["first_cap_bytes"], cap["cap_bytes"]) == [
            len(b["params"]) for b in cap["buckets"]]
        assert cap["caps_as_stated"] and cap["rule_agrees"] and cap["ddp_agrees"] and cap["same_buckets_every_block"]
        limits = [cap["first_cap_bytes"]] + [cap["cap_bytes"]] * (cap["count"] - 2)
        assert all(b["bytes"] >= limit for b, limit in zip(cap["buckets"][:-1], limits))  # closed at its cap


def test_ranks_are_bitwise_equal_for_every_cap(quick_run):
    _, results = quick_run
    for cap in results["caps"]:
        assert cap["ranks_equal"] and cap["ranks_max_diff"] == 0.0, cap["cap"]
        assert len(cap["repeats"]) == QUICK.repeats
        # 2 ranks: each element is one addition, a/2 + b/2, whatever the buckets: every cap, the same bits
        assert cap["same_as_first_block"] and cap["first_block_max_diff"] == 0.0, cap["cap"]


def test_one_caps_traces_hold_one_allreduce_per_bucket(quick_run):
    out, results = quick_run
    traced = {c["cap"]: c for c in results["caps"]}[label(TRACE_CAP)]
    assert results["traces"]["files"] == [TRACE_NAME.format(rank=r) for r in range(2)]
    assert sorted(p.name for p in out.glob("*.json.gz")) == results["traces"]["files"]  # the other caps' are gone
    for name in results["traces"]["files"]:
        with gzip.open(out / name, "rt") as f:
            events = json.load(f)["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith(STEP) and e.get("ph") == "X"]
        assert len(steps) == QUICK.profiled
        assert sum(e.get("name") == ALLREDUCE for e in events) == QUICK.profiled * traced["count"]
    rows = traced["overlap"]["rows"]
    assert len(rows) == 2 * QUICK.profiled * traced["count"]
    assert all(0 <= r["overlapped_ms"] <= r["allreduce_ms"] + 1e-9 for r in rows)


def test_results_on_disk(quick_run):
    out, results = quick_run
    assert json.loads((out / "buckets.json").read_text()) == json.loads(json.dumps(plain(results)))
    assert results["measurement"] == "buckets"
    assert "--quick" in check_provenance(results, "minitrain.measure.buckets", "corpus_sha256").command
    assert results["benchmark"]["file"] is None and results["caps"][0]["predicted_ms"] is None  # no --bench: no fit
    assert results["config"]["plan"] == json.loads(json.dumps(asdict(QUICK)))  # the workers ran the driver's plan
    assert (out / "buckets.png").stat().st_size > 0
    assert not list(out.glob(".*"))  # no temporary files left behind


def test_findings_hold_the_runs_numbers(quick_run):
    _, results = quick_run
    default, traced = results["caps"]
    check_findings(results["findings"], {
        "buckets_at_default": 1,
        "most_buckets": traced["count"],
        "default_over_fastest_cap_step": default["step_ms"] / min(default["step_ms"], traced["step_ms"]),
        "step_most_buckets_over_default": traced["step_ms"] / default["step_ms"],
        "overlapped_share_default": default["overlap"]["overlapped_share"],
        "overlapped_share_most_buckets": traced["overlap"]["overlapped_share"],
        "caps_with_ranks_equal": 2})


def test_the_live_runs_checks_hold_and_name_a_broken_fact(quick_run):
    _, results = quick_run
    assert checks(results) and all(checks(results).values())  # what notebook 11's live run asserts
    broken = copy.deepcopy(results)
    broken["caps"][1]["ranks_equal"] = False
    assert checks(broken)["both ranks bitwise equal after every block, every cap"] is False


def test_closing_rule_on_hand_made_sizes():
    assert ddp_caps(None) == (MiB, 25 * MiB) and ddp_caps(25) == (25 * MiB, 25 * MiB)
    # a bucket closes once it holds at least its cap; a tensor is never split; the rest is the last bucket
    assert bucket_partition([40, 70, 10, 100, 5], 100, 100) == [2, 2, 1]
    assert bucket_partition([40, 60, 10], 100, 100) == [2, 1]  # exactly the cap closes it
    assert bucket_partition([40, 70, 10, 100, 5], 1000, 50) == [5]  # the first cap never reached
    assert bucket_partition([40, 70, 10, 100, 5], 30, 1000) == [1, 4]  # a small first cap, then a big one


def span(name: str, start_us: float, end_us: float, tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "ts": start_us, "dur": end_us - start_us, "tid": tid}


def test_overlap_rows_per_bucket_on_hand_made_events():
    events = [span(f"{STEP}0", 0, 1000),
              span(f"{BACKWARD_OP} AddmmBackward0", 100, 600),
              span(ALLREDUCE, 450, 650, tid=8),  # started during backward on one gloo thread
              span(ALLREDUCE, 200, 300, tid=7),  # the first bucket, on the other
              span(ALLREDUCE, 600, 900, tid=7)]  # the last bucket, ready when backward ended
    rows = overlap_table(events)
    assert [(r["allreduce"], r["thread"]) for r in rows] == [(0, 7), (1, 8), (2, 7)]
    assert [r["start_ms"] for r in rows] == pytest.approx([-0.4, -0.15, 0.0])
    assert [r["overlapped_ms"] for r in rows] == pytest.approx([0.1, 0.15, 0.0])
    assert overlapped_share(rows) == pytest.approx(0.25 / 0.6)


def made_up(default_ms: tuple[float, float, float], most_ms: tuple[float, float, float],
            most_backward_ms: float = 20.0) -> dict:
    """Results with the default cap and cap 25 (the same 1 bucket), and a small cap (8 buckets):
    (median, min, max) step ms; cap 25 sits 1 ms above the default."""
    def cap(name: str, count: int, ms: tuple[float, float, float], share: float, backward_ms: float) -> dict:
        params = [["w"]] if count == 1 else [[f"w{i}"] for i in range(count)]
        return {"cap": name, "count": count, "step_ms": ms[0], "step_ms_range": list(ms[1:]),
                "buckets": [{"params": p} for p in params],
                "tokens_per_s": 2048 / ms[0] * 1e3, "predicted_ms": 0.3 * count + 0.7, "rule_agrees": True,
                "ranks_equal": True, "same_as_first_block": True, "repeats": [{}] * 3,
                "overlap": {"overlapped_share": share, "after_backward_ms": 1.0, "backward_ms": backward_ms,
                            "rows": [{"rank": r, "step": k, "allreduce_ms": 1.0, "overlapped_ms": share + 0.01 * k}
                                     for r in range(2) for k in range(4)]}}
    return {"gradient_bytes": 1_094_016, "config": {"world_size": 2, "plan": {"profiled": 4}},
            "provenance": Provenance(**PROVENANCE | {"cores": 2}),
            "benchmark": {"fit": {"max_relative_error": 0.25}, "date": "2026-11-30T08:45:36+00:00"},
            "caps": [cap("default", 1, default_ms, 0.02, 20.0),
                     cap("25", 1, tuple(x + 1 for x in default_ms), 0.03, 22.0),
                     cap("0.01", 8, most_ms, 0.8, most_backward_ms)]}


def test_takeaway_follows_the_data():
    slower = takeaway(made_up((30, 29, 31), (40, 38, 42)))
    assert "no cap with more buckets was faster" in slower and "with 8 buckets the step took 40.0 ms" in slower
    assert "(10.0 ms more). Notebook 07's fit prices the 7 extra all-reduces at about 2.1 ms, an estimate: a line through one run's medians" in slower
    assert "worst miss" not in slower  # the fit's miss on its own points is not its accuracy for another run
    assert "took about as long, 20.0 ms against 20.0 ms" in slower and "correlation" not in slower
    # backward's nodes much longer: reported as a correlation, with the same-bucket caps' spread beside it
    hedged = takeaway(made_up((30, 29, 31), (40, 38, 42), most_backward_ms=30.0))
    assert "took longer, 30.0 ms against 20.0 ms" in hedged and "20.0-22.0 ms across the caps" in hedged
    assert "With 8 samples per cap, a correlation, not a measured cause" in hedged
    faster = takeaway(made_up((30, 29, 31), (25, 24, 26)))
    assert "8 buckets (cap 0.01) gave the shortest median step" in faster and "1.20x" in faster
    assert "even with 8 buckets the step was shorter, 25.0 ms" in faster
    assert "Every cap with more buckets overlapped more in every profiled (step, rank) than the default in any" in faster
    assert "the trace does not say which part" in faster and "outweighed" not in faster
    # the fastest cap's repeats overlap the default's: no gain, and the same-bucket caps show the noise
    unclear = takeaway(made_up((30, 27, 33), (29, 28, 30)))
    assert "(8 buckets, 29.0 ms, repeats 28.0-30.0 ms), overlaps the default's repeats (27.0-33.0 ms)" in unclear
    assert "same single bucket (default and 25) have medians of 30.0 and 31.0 ms" in unclear
    assert "no clear difference, the repeats' ranges overlap" in unclear
    # the wait after backward beside the same-bucket caps' spread, and the hook named in the per-bucket cost
    assert "waited 1.0 ms by default, 1.0 ms with 8 buckets" in slower and "waited 1.0 and 1.0 ms, and 1.0 lies within" in slower
    assert "the lab's Python comm hook on every bucket" in hedged
    apart = made_up((30, 29, 31), (40, 38, 42))
    apart["caps"][1]["overlap"]["after_backward_ms"], apart["caps"][2]["overlap"]["after_backward_ms"] = 3.0, 7.0
    assert "waited 1.0 and 3.0 ms, and 7.0 lies above that spread" in takeaway(apart)
    alone = copy.deepcopy(apart)
    del alone["caps"][1]  # one single-bucket cap: no spread to set beside
    assert "that spread" not in takeaway(alone) and "7.0 ms with 8 buckets (medians, profiled steps)." in takeaway(alone)
    close = made_up((30, 27, 33), (29, 28, 30))  # the 8-bucket cap's steps overlap the default's: no verdict
    close["caps"][2]["overlap"]["rows"] = close["caps"][0]["overlap"]["rows"]
    assert "No cap with more buckets overlapped more" in takeaway(close)


def test_takeaway_on_the_committed_run_sets_the_wait_beside_its_noise():
    from minitrain.measure import buckets

    results = buckets.MEASUREMENT.load()
    alike = [c for c in results["caps"] if c["count"] == 1]
    text = takeaway(results)
    assert " and ".join([", ".join(f"{c['overlap']['after_backward_ms']:.1f}" for c in alike[:-1]),
                         f"{alike[-1]['overlap']['after_backward_ms']:.1f}"]) + " ms, and" in text
    assert "(stock DDP scales in C++; notebook 15 times it without a hook)" in text


def test_takeaway_names_the_cap_that_did_not_overlap_more():
    results = made_up((30, 27, 33), (29, 28, 30))
    second = copy.deepcopy(results["caps"][2]) | {"cap": "0.5", "count": 2}  # its lowest step's share below the default's
    second["overlap"]["rows"] = [r | {"overlapped_ms": 0.01 if k == 0 else 0.9}
                                 for k, r in enumerate(second["overlap"]["rows"])]
    results["caps"].insert(2, second)
    text = takeaway(results)
    assert "1 of the 2 caps with more buckets overlapped more" in text
    assert "the exception, cap 0.5 (2 buckets), had a step at 1.0%, not above the default's highest, 5.0%" in text


def test_findings_on_made_up_numbers():
    results = made_up((30, 29, 31), (25, 24, 26))
    found = check_findings(findings(results), {
        "buckets_at_default": 1, "most_buckets": 8, "default_over_fastest_cap_step": 1.2,
        "step_most_buckets_over_default": 25 / 30, "overlapped_share_default": 0.02,
        "overlapped_share_most_buckets": 0.8, "caps_with_ranks_equal": 3})
    assert "1.04 MiB of gradients" in found["buckets_at_default"].meaning
    assert found["caps_with_ranks_equal"].unit == "of 3 caps"
    assert found["default_over_fastest_cap_step"].meaning.endswith(
        "repeats 24.0-26.0 ms against the default's 29.0-31.0 ms: every repeat faster")
    unclear = check_findings(findings(made_up((30, 27, 33), (29, 28, 30))), {
        "buckets_at_default": 1, "most_buckets": 8, "default_over_fastest_cap_step": 30 / 29,
        "step_most_buckets_over_default": 29 / 30, "overlapped_share_default": 0.02,
        "overlapped_share_most_buckets": 0.8, "caps_with_ranks_equal": 3})
    assert unclear["default_over_fastest_cap_step"].meaning.endswith("within the spread, no clear gain")
