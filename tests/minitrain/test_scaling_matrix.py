"""The scaling matrix: a real --quick run (fields, affinity, threads), and its summary, crossings and
findings on made-up numbers."""

import pytest

from helpers import check_findings, check_provenance
from minitrain.measure import scaling_matrix as sm, scaling_reading


@pytest.fixture(scope="module")
def quick_results(corpus_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("matrix")
    sm.main(["--quick", "--out", str(out), "--corpus-dir", str(corpus_dir)])
    assert (out / "scaling_matrix.png").stat().st_size > 0
    return sm.MEASUREMENT.load(out)


def test_quick_run_records_every_field(quick_results):
    assert {"measurement", "configurations", "sizes", "cores", "load_average", "runs", "points",
            "summary", "findings", "provenance"} <= quick_results.keys()
    assert quick_results["measurement"] == "scaling_matrix"
    assert "--quick" in check_provenance(quick_results, "minitrain.measure.scaling_matrix").command
    for run in quick_results["runs"]:
        assert {"config", "scaling", "tokens_per_sec", "step_breakdown_ms", "allreduce_share",
                "threads_per_rank", "ranks", "command"} <= run.keys()
        assert run["tokens_per_sec"]["median"] > 0
        assert len(run["ranks"]) == run["nproc"]
    assert {p["config"] for p in quick_results["points"]} == {sm.ALL_CORES, sm.PINNED}
    assert quick_results["summary"] == sm.summary(quick_results)
    assert quick_results["findings"] == sm.findings(quick_results)
    assert isinstance(sm.results_table(quick_results), str)


def test_quick_findings_hold_the_summarys_numbers(quick_results):
    summary = quick_results["summary"]
    assert summary["scalings"] == ["weak"]
    # no 2-process x 1-thread run in --quick: no ratio, no share; the crossing count is always there
    check_findings(quick_results["findings"], {
        "weak_clear_crossings": sum(c["separated"] for c in summary["crossings"])})


def test_pinned_ranks_really_had_one_core(quick_results):
    pinned = [r for r in quick_results["runs"] if r["config"] == sm.PINNED]
    assert pinned
    for run in pinned:
        assert [rank["affinity"] for rank in run["ranks"]] == [[run["pinned_core"]]] * 2
        assert run["command"].startswith(f"taskset -c {run['pinned_core']} ")


def test_thread_counts_are_as_configured(quick_results):
    for run in quick_results["runs"]:
        assert run["threads_per_rank"] == run["threads_configured"]
        assert [rank["threads"] for rank in run["ranks"]] == [run["threads_configured"]] * run["nproc"]
    unpinned = next(r for r in quick_results["runs"] if r["config"] == sm.ALL_CORES)
    assert unpinned["threads_configured"] == quick_results["cores"]
    assert len(unpinned["ranks"][0]["affinity"]) == quick_results["cores"]


def fake_run(config: str, params: int, tokens_per_sec: float, share: float = 0.1) -> dict:
    """The fields of a run that the summary reads; 1-process runs serve weak and strong alike."""
    nproc = 2 if config in (sm.TWO_PROCS, sm.PINNED) else 1
    return {"config": config, "scaling": ["weak"] if nproc == 2 else ["weak", "strong"],
            "params": params, "tokens_per_sec": {"median": tokens_per_sec}, "allreduce_share": share}


def summarized(runs: list[dict]) -> dict:
    """Results as scaling_matrix.run() builds them before writing: runs, cores, summary, findings."""
    results = {"runs": runs, "cores": 2}
    results["summary"] = sm.summary(results)
    results["findings"] = sm.findings(results)
    return results


def test_summary_and_findings_on_made_up_numbers():
    small, large = 200_000, 5_000_000
    runs = []
    for repeat_offset in (-10, 0, 10):  # three repeats around a known median
        runs += [fake_run(sm.ONE_THREAD, small, 1000 + repeat_offset),
                 fake_run(sm.ALL_CORES, small, 1250 + repeat_offset),
                 fake_run(sm.TWO_PROCS, small, 2000 + repeat_offset, share=0.10),
                 fake_run(sm.PINNED, small, 800 + repeat_offset, share=0.30),
                 fake_run(sm.ONE_THREAD, large, 100 + repeat_offset),
                 fake_run(sm.ALL_CORES, large, 190 + repeat_offset),
                 fake_run(sm.TWO_PROCS, large, 150 + repeat_offset, share=0.25),
                 fake_run(sm.PINNED, large, 75 + repeat_offset, share=0.40)]
    results = summarized(runs)
    f = results["summary"]

    assert f["sizes"] == [small, large] and f["scalings"] == ["weak", "strong"] and f["cores"] == 2
    first, last = f["per_size"]
    assert first["speedup_2proc_over_1proc_allcores"]["weak"] == pytest.approx(2000 / 1250)
    assert last["speedup_2proc_over_1proc_allcores"]["weak"] == pytest.approx(150 / 190)
    assert first["speedup_2proc_over_1proc_1thread"]["weak"] == pytest.approx(2.0)
    assert last["pinned_over_2proc"]["weak"] == pytest.approx(0.5)
    assert first["pinned_over_1proc_1thread"]["weak"] == pytest.approx(0.8)
    assert first["speedup_2proc_over_1proc_allcores"]["strong"] is None  # no 2-process strong runs
    assert f["ranges"]["speedup_2proc_over_1proc_allcores"]["weak"] == pytest.approx([150 / 190, 1.6])
    assert f["largest_allreduce_share_2proc"]["weak"] == {"params": large, "share": 0.25}
    assert f["largest_allreduce_share_2proc"]["strong"] is None

    # 1 process x all cores overtakes 2 processes between the two sizes; nothing else changes rank
    assert f["crossings"] == [{"scaling": "weak", "between_params": [small, large],
                               "faster_before": sm.TWO_PROCS, "faster_after": sm.ALL_CORES,
                               "separated": True}]
    assert sm.crossings(sm.points(runs), "weak") == f["crossings"]
    assert sm.crossings(sm.points(runs), "strong") == []

    found = check_findings(results["findings"], {
        "weak_2proc_over_1proc_allcores": [150 / 190, 1.6],
        "weak_largest_allreduce_share": 0.25,
        "weak_clear_crossings": 1,
        "strong_clear_crossings": 0})  # strong: no 2-process run, so no ratio and no share
    assert "weak scaling, 0.20M-5.00M parameters" in found["weak_2proc_over_1proc_allcores"].meaning
    assert "largest at 5.00M parameters (weak scaling)" in found["weak_largest_allreduce_share"].meaning
    assert found["weak_clear_crossings"].meaning == f"{sm.TWO_PROCS} -> {sm.ALL_CORES} between 0.20M and 5.00M"
    assert "no configuration overtakes another" in found["strong_clear_crossings"].meaning


def test_crossing_inside_the_spread_is_not_a_clear_crossing():
    runs = [fake_run(c, n, tps) for n, spread in ((1, 0), (2, 60)) for offset in (-spread, 0, spread)
            for c, tps in ((sm.ONE_THREAD, 100 + (n - 1) * 20 + offset), (sm.TWO_PROCS, 110 + offset))]
    results = summarized(runs)
    assert [(c["faster_before"], c["faster_after"], c["separated"]) for c in results["summary"]["crossings"]] == [
        (sm.TWO_PROCS, sm.ONE_THREAD, False)]
    found = check_findings(results["findings"], {"weak_largest_allreduce_share": 0.1, "weak_clear_crossings": 0,
                                                 "strong_clear_crossings": 0})
    assert "beyond the spread of the repeats" in found["weak_clear_crossings"].meaning


def test_no_crossing_when_the_order_holds():
    runs = [fake_run(c, n, tps * scale) for n, scale in ((1, 1.0), (2, 0.5), (3, 0.25))
            for c, tps in ((sm.ONE_THREAD, 100), (sm.TWO_PROCS, 200))]
    results = summarized(runs)
    summary = results["summary"]
    assert summary["crossings"] == [] == sm.crossings(sm.points(runs), "weak")
    # 2 processes x 1 thread were faster than 1 thread at every size, 2.00x
    assert summary["ranges"]["speedup_2proc_over_1proc_1thread"]["weak"] == pytest.approx([2.0, 2.0])
    assert summary["ranges"]["speedup_2proc_over_1proc_allcores"]["weak"] is None  # no all-cores runs
    check_findings(results["findings"], {"weak_largest_allreduce_share": 0.1, "weak_clear_crossings": 0,
                                         "strong_clear_crossings": 0})


def verdict_row(table: str, start: str) -> str:
    """The row of `scaling_reading.verdict_table` that starts with `start`."""
    return next(line for line in table.splitlines() if line.startswith(start))


def test_the_verdict_table_judges_every_size_over_the_repeats():
    """The verdicts come from verdict_over_repeats on the committed runs, and flip with them."""
    import copy

    results = sm.MEASUREMENT.load()
    sizes = results["summary"]["sizes"]
    boosted = copy.deepcopy(results)  # 2 processes 10x faster at every size and in both scalings
    for run in boosted["runs"]:
        if run["config"] == sm.TWO_PROCS:
            run["tokens_per_sec"]["median"] *= 10
    labels = {c["name"]: c["label"] for c in results["configurations"]}
    for scaling in results["summary"]["scalings"]:
        row = verdict_row(scaling_reading.verdict_table(boosted), f"2 processes x 1 thread vs {labels[sm.ALL_CORES]}, {scaling}")
        assert row.count("faster") == len(sizes) and "slower" not in row and "no clear" not in row
    table = scaling_reading.verdict_table(results)
    assert ("with every repeat apart at both sizes: none" in table
            or any(c["separated"] for c in results["summary"]["crossings"]))
    assert f"by median): {len(results['summary']['crossings'])};" in table  # the crossing defined, all of them counted
    # beside the table: the weak verdict mixes processes against threads with op size; the strong one counted
    assert "weak mixes processes against threads with op size" in table
    strong = verdict_row(table, f"2 processes x 1 thread vs {labels[sm.ALL_CORES]}, strong")
    assert (f"is like for like: 2 processes slower at {strong.count('slower')}, faster at {strong.count('faster')} "
            f"of {len(sizes)} sizes") in table
    assert f"2 processes slower at 0, faster at {len(sizes)} of" in scaling_reading.verdict_table(boosted)
    clear = copy.deepcopy(results)
    clear["summary"]["crossings"] = [{"scaling": "weak", "between_params": sizes[:2], "faster_before": sm.TWO_PROCS,
                                      "faster_after": sm.ALL_CORES, "separated": True}]
    assert f"{labels[sm.TWO_PROCS]} -> {labels[sm.ALL_CORES]} between" in scaling_reading.verdict_table(clear)


def test_the_pinned_verdict_names_its_baseline_by_its_configuration():
    """The pinned pair is judged against 1 process x 1 thread, which was allowed on every core: no "one core"."""
    import copy

    results = sm.MEASUREMENT.load()
    one_thread = {(r["scaling"][0], r["params"]): r["tokens_per_sec"]["median"]
                  for r in results["runs"] if r["config"] == sm.ONE_THREAD}
    sizes = results["summary"]["sizes"]
    slow, even = copy.deepcopy(results), copy.deepcopy(results)
    for run in slow["runs"]:
        if run["config"] == sm.PINNED:
            run["tokens_per_sec"]["median"] = 0.1 * min(one_thread.values())
    assert verdict_row(scaling_reading.verdict_table(slow), "pinned vs 1 process x 1 thread").count("slower") == len(sizes)
    for run in even["runs"]:  # the pinned pair's repeats spread around one process's: no clear winner anywhere
        if run["config"] == sm.PINNED:
            run["tokens_per_sec"]["median"] = one_thread[("weak", run["params"])] * (1 + 0.5 * (run["repeat"] - 1))
    row = verdict_row(scaling_reading.verdict_table(even), "pinned vs 1 process x 1 thread")
    assert row.count("no clear winner") == len(sizes)
    assert "one core" not in scaling_reading.verdict_table(results).replace("pinned to 1 core", "")


def test_ddp_buckets_follow_from_the_bytes_and_the_caps():
    """Two buckets where the bytes force them in any order; the lab's model, past the first cap by less
    than its biggest tensor, is 1 or 2 by the bytes, and what notebook 10 recorded where it is given."""
    results = sm.MEASUREMENT.load()
    configs = {r["params"]: r["model_config"] for r in results["runs"]}
    first, *larger = results["summary"]["sizes"]
    assert scaling_reading.ddp_buckets(configs[first], 64) == (1, 2, False)
    key = tuple(configs[first][k] for k in ("n_layer", "n_head", "n_embd")) + (64,)
    assert scaling_reading.ddp_buckets(configs[first], 64, {key: 1}) == (1, 1, True)
    assert all(scaling_reading.ddp_buckets(configs[n], 64)[:2] == (2, 2) for n in larger)
    assert [scaling_reading.bucket_label(b) for b in ((1, 1, True), (1, 2, False), (2, None, False))] == [
        "1*", "1 or 2", "2 or more"]


def test_the_hook_reading_follows_the_curves_and_the_buckets():
    """Growth from the first size to the second for pinned and unpinned alike; no bucket count given as the peak's
    cause (never tested); the hook's time includes what overlapped backward, from the first size DDP splits."""
    results = sm.MEASUREMENT.load()
    sizes = results["summary"]["sizes"]
    split = {n: (1, 1, True) if n == sizes[0] else (2, 2, False) for n in sizes}
    text = scaling_reading.hook_reading(results, split)
    assert f"grow {sizes[1] / sizes[0]:.1f}x" in text and "x unpinned and" in text and "x pinned" in text
    assert "also counts backward's work on the shared cores" in text and "splits into two buckets" not in text
    assert f"from {sm.params_label(sizes[1])} on DDP makes more than one bucket" in text
    late = {n: (2, 2, False) if n == sizes[-1] else (1, 1, False) for n in sizes}
    assert f"from {sm.params_label(sizes[-1])} on DDP" in scaling_reading.hook_reading(results, late)
    single = {n: (1, 1, False) for n in sizes}
    assert "more than one bucket" not in scaling_reading.hook_reading(results, single)
    table = scaling_reading.hook_table(results, split)
    assert "share peak" in table and "1*" in table and "recorded by notebook 10" in table

