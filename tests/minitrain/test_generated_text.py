"""Notebooks 08 and 12-15's generated sentences say what the data show, for the committed results and for altered
copies of them (no run: the committed json files, changed in place)."""

import copy

import pytest

from minitrain.measure import compression, restart, scaling_matrix as sm, scaling_reading, scratch, two_hosts
from minitrain.measure.scaling_runs import PINNED, TWO_PROCS


@pytest.fixture(scope="module")
def committed():
    return {"scratch": scratch.MEASUREMENT.load(), "restart": restart.MEASUREMENT.load(),
            "two_hosts": two_hosts.MEASUREMENT.load()}


def levels(results: dict) -> dict[str, dict]:
    return {level["name"]: level for level in results["levels"]}


def test_the_wait_gets_no_verdict_without_its_rounds(committed):
    """The committed scratch.json keeps only rank 0's median finish(): the medians, no verdict, no lesson."""
    results = committed["scratch"]
    naive, over = levels(results)["NaiveDDP"], levels(results)["OverlappedDDP"]
    assert "finish_ms_rounds" not in over  # measured before the rounds were recorded
    said = scratch.compared_text(results).splitlines()[1]
    assert (f"finish() waited {over['finish_ms']:.1f} against {naive['finish_ms']:.1f} ms (rank 0's medians; no "
            "rounds recorded, so no verdict)") in said
    assert "shortened" not in said


def test_the_overlap_lesson_is_said_only_when_the_wait_shrank_and_the_step_did_not_gain(committed):
    results = copy.deepcopy(committed["scratch"])
    naive, over = levels(results)["NaiveDDP"], levels(results)["OverlappedDDP"]
    over["finish_ms"], naive["finish_ms"] = 10.0, 20.0
    over["finish_ms_rounds"], naive["finish_ms_rounds"] = [[10.0] * 5] * 2, [[20.0] * 5] * 2
    over["step_ms_rounds"] = [[55.0] * 5, [55.0] * 5]
    naive["step_ms_rounds"] = [[54.0] * 5, [54.0] * 5]
    for row in over["overlap_rows"]:
        row["backward_ms"] = 30.0
    for row in naive["overlap_rows"]:
        row["backward_ms"] = 20.0
    said = scratch.compared_text(results).splitlines()[1]
    samples = len({(r["rank"], r["step"]) for r in over["overlap_rows"]})
    assert "10.0 against 20.0 ms (shorter over both ranks' block medians)" in said
    assert "(slower over both ranks' block medians)" in said and said.endswith(
        f"not the step. Backward was longer in every profiled (step, rank) than NaiveDDP's in any ({samples} against "
        f"{samples}): a correlation, not a measured cause.")

    over["finish_ms_rounds"] = [[10.0] * 9 + [25.0]] * 2  # one stray round in a block of two: still shorter
    assert "(shorter over both ranks' block medians)" in scratch.compared_text(results)
    over["finish_ms_rounds"] = [[10.0, 25.0] * 3, [25.0, 10.0] * 3]  # the block medians overlap: no lesson
    said = scratch.compared_text(results).splitlines()[1]
    assert "(no clear difference over both ranks' block medians)" in said and "shortened" not in said
    over["finish_ms_rounds"] = [[10.0] * 5] * 2

    for row in over["overlap_rows"]:
        row["backward_ms"] = 10.0  # backward shorter: said as measured, no cause
    assert "Backward was shorter in every profiled" in scratch.compared_text(results).splitlines()[1]
    for row in over["overlap_rows"]:
        row["backward_ms"] = 10.0 if row["step"] % 2 else 30.0  # the ranges overlap: no difference claimed
    assert scratch.compared_text(results).splitlines()[1].endswith("overlap NaiveDDP's: no clear difference.")

    over["step_ms_rounds"] = [[40.0] * 5, [40.0] * 5]  # faster: no lesson about a step that gained
    said = scratch.compared_text(results).splitlines()[1]
    assert "(faster over" in said and "not the step" not in said

    over["step_ms_rounds"], over["finish_ms_rounds"] = [[55.0] * 5, [55.0] * 5], [[25.0] * 5] * 2  # the wait grew
    said = scratch.compared_text(results)
    assert "(longer over both ranks' block medians)" in said and "not the step" not in said


def test_the_small_cap_comparison_names_its_baseline(committed):
    """The table's verdicts are against torch DDP at default caps, the sentence's against torch DDP at 0.25 MiB."""
    results = committed["scratch"]
    assert scratch.table(results).splitlines()[0].split()[6:9] == ["vs", "torch", "DDP"]
    small = levels(results)["BucketedDDP, 0.25 MiB"]
    verdict = scratch.step_verdict(small, levels(results)["torch DDP, 0.25 MiB"])
    assert (f"- BucketedDDP, 0.25 MiB (6 all-reduces) against torch DDP, 0.25 MiB (4), not the table's torch DDP: "
            f"{verdict} over") in scratch.compared_text(results)


def test_the_bytes_above_the_theory_follow_the_all_reduces_only_when_they_do():
    results = compression.MEASUREMENT.load()
    sizes = [v["theory"]["bytes"] for v in results["variants"]]
    assert compression.above_text(results) == (
        f"Every variant sent 576 bytes a step above the theory per all-reduce a bucket takes, for {min(sizes):,.0f} "
        f"to {max(sizes):,.0f} bytes in theory: here the excess follows the number of all-reduces, not their size.")
    altered = copy.deepcopy(results)
    altered["variants"][3]["sent"] += 3 * 48  # one more header per PowerSGD all-reduce
    said = compression.above_text(altered)
    assert said.startswith("Above the theory, per all-reduce a bucket takes: plain 576, ")
    assert "powersgd-1 624" in said and "not the same for every variant" in said and "follows" not in said
    for v in altered["variants"]:
        v["sent"] = None  # no socket counters (not Linux): nothing said
    assert compression.above_text(altered) == ""


def test_strong_scaling_share_counts_the_sizes_apart_by_the_noise_rule():
    results = sm.MEASUREMENT.load()
    said = scaling_reading.strong_against_weak(results)
    assert said == (" Strong scaling halves each rank's batch but not its gradients: its median share is the larger "
                    "at every size, every repeat above weak's at 3 of 4 sizes unpinned and 4 of 4 pinned.")
    assert said in scaling_reading.hook_reading(results, {n: (1, 1, False) for n in results["summary"]["sizes"]})
    altered = copy.deepcopy(results)
    first = results["summary"]["sizes"][0]
    for run in altered["runs"]:  # the first size's strong shares below weak's, pinned and not
        if run["params"] == first and "strong" in run["scaling"] and run["config"] in (TWO_PROCS, PINNED):
            run["allreduce_share"] = 0.01
    assert scaling_reading.strong_against_weak(altered) == (
        " Strong scaling halves each rank's batch but not its gradients; its median share is the larger at 3 of 4 "
        "sizes unpinned and 3 of 4 pinned, every repeat above weak's at 3 of 4 sizes unpinned and 3 of 4 pinned.")
    weak_only = copy.deepcopy(results)
    weak_only["runs"] = [run for run in weak_only["runs"] if "strong" not in run["scaling"]]
    assert scaling_reading.strong_against_weak(weak_only) == ""


def test_the_levels_sentences_quote_the_results_and_no_fit(committed):
    results = committed["scratch"]
    naive, buck = levels(results)["NaiveDDP"], levels(results)["BucketedDDP"]
    said = scratch.compared_text(results)
    assert f"waited {naive['finish_ms']:.1f} ms, BucketedDDP's (1 all-reduce) {buck['finish_ms']:.1f} ms" in said
    assert "alpha" not in said and "fit" not in said  # item 7: no price from the benchmark's fit
    median = scratch.profiled_backward_ms(levels(results)["OverlappedDDP"])
    assert f"backward in the profiled steps {median:.1f} against" in said


def test_the_two_hosts_times_are_one_run_each_and_no_finding(committed):
    results = copy.deepcopy(committed["two_hosts"])
    said = two_hosts.takeaway(results)
    assert said.startswith("The two-node run's final weights are bitwise equal to the one-host run's")
    assert "One run of each, so no spread: a gap between the columns is no finding." in said
    assert f"{results['two_hosts']['step_ms_median']:6.1f} ms" in said
    results["bitwise_equal"] = False
    assert "are NOT bitwise equal to" in two_hosts.takeaway(results)


def test_the_restart_takeaway_says_what_the_log_did_not_show(committed):
    results = copy.deepcopy(committed["restart"])
    assert "first step         2.95 s after the fault" in restart.takeaway(results).replace(
        f"{restart.event_time(results, 'first_step'):.2f}", "2.95")
    results["timeline"] = [e for e in results["timeline"] if e["event"] != "first_step"]
    assert "first step         not in the log" in restart.takeaway(results)


def test_the_done_wrong_table_names_a_lower_loss_only_when_there_is_one(committed):
    results = copy.deepcopy(committed["restart"])
    for run in results["done_wrong"]["runs"]:
        run["final_loss"] = [5.0, 5.5]  # higher than the uninterrupted run's
    table = restart.done_wrong_table(results)
    assert "came out lower" not in table and table.splitlines()[2].split()[:2] == ["optimizer", "False"]
    results["done_wrong"]["runs"][1]["final_loss"] = [5.0, 4.9]
    assert "without the data item it came out lower: no proof of a resume" in restart.done_wrong_table(results)
