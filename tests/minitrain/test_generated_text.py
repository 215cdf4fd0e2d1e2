"""Notebooks 13-15's generated sentences say what the data show, for the committed results and for altered
copies of them (no run: the committed json files, changed in place)."""

import copy

import pytest

from minitrain.measure import restart, scratch, two_hosts


@pytest.fixture(scope="module")
def committed():
    return {"scratch": scratch.MEASUREMENT.load(), "restart": restart.MEASUREMENT.load(),
            "two_hosts": two_hosts.MEASUREMENT.load()}


def levels(results: dict) -> dict[str, dict]:
    return {level["name"]: level for level in results["levels"]}


def test_the_overlap_lesson_is_said_only_when_the_wait_shrank_and_the_step_did_not_gain(committed):
    results = copy.deepcopy(committed["scratch"])
    naive, over = levels(results)["NaiveDDP"], levels(results)["OverlappedDDP"]
    over["finish_ms"], naive["finish_ms"] = 10.0, 20.0
    over["step_ms_rounds"] = [[55.0] * 5, [55.0] * 5]
    naive["step_ms_rounds"] = [[54.0] * 5, [54.0] * 5]
    for row in over["overlap_rows"]:
        row["backward_ms"] = 30.0
    for row in naive["overlap_rows"]:
        row["backward_ms"] = 20.0
    said = scratch.compared_text(results).splitlines()[1]
    samples = len({(r["rank"], r["step"]) for r in over["overlap_rows"]})
    assert "(slower over both ranks' block medians)" in said and said.endswith(
        f"not the step; backward was longer in every profiled (step, rank) than NaiveDDP's in any ({samples} against "
        f"{samples}): a correlation, not a measured cause.")

    for row in over["overlap_rows"]:
        row["backward_ms"] = 10.0  # backward shorter: said as measured, no cause
    assert "backward was shorter in every profiled" in scratch.compared_text(results).splitlines()[1]
    for row in over["overlap_rows"]:
        row["backward_ms"] = 10.0 if row["step"] % 2 else 30.0  # the ranges overlap: no difference claimed
    assert scratch.compared_text(results).splitlines()[1].endswith("overlap NaiveDDP's: no clear difference.")

    over["step_ms_rounds"] = [[40.0] * 5, [40.0] * 5]  # faster: no lesson about a step that gained
    said = scratch.compared_text(results).splitlines()[1]
    assert "(faster over" in said and "not the step" not in said

    over["step_ms_rounds"], over["finish_ms"] = [[55.0] * 5, [55.0] * 5], 25.0  # the wait grew: no lesson
    assert "not the step" not in scratch.compared_text(results)


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
