"""The scaling matrix: a real --quick run (fields, affinity, threads) and the findings on made-up numbers."""

import json

import pytest

from minitrain import scaling_matrix as sm


@pytest.fixture(scope="module")
def quick_results(corpus_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("matrix")
    sm.main(["--quick", "--out", str(out), "--corpus-dir", str(corpus_dir)])
    assert (out / "scaling_matrix.png").stat().st_size > 0
    return json.loads((out / "scaling_matrix.json").read_text())


def test_quick_run_records_every_field(quick_results):
    assert {"command", "configurations", "sizes", "provenance", "load_average", "runs", "points",
            "findings"} <= quick_results.keys()
    assert "--quick" in quick_results["command"]
    for run in quick_results["runs"]:
        assert {"config", "scaling", "tokens_per_sec", "step_breakdown_ms", "allreduce_share",
                "threads_per_rank", "ranks", "command"} <= run.keys()
        assert run["tokens_per_sec"]["median"] > 0
        assert len(run["ranks"]) == run["nproc"]
    assert {p["config"] for p in quick_results["points"]} == {sm.ALL_CORES, sm.PINNED}
    assert isinstance(sm.findings_sentence(quick_results["findings"]), str)


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
    assert unpinned["threads_configured"] == quick_results["provenance"]["cores"]
    assert len(unpinned["ranks"][0]["affinity"]) == quick_results["provenance"]["cores"]


def fake_run(config: str, params: int, tokens_per_sec: float, share: float = 0.1) -> dict:
    """The fields of a run that the findings read; 1-process runs serve weak and strong alike."""
    nproc = 2 if config in (sm.TWO_PROCS, sm.PINNED) else 1
    return {"config": config, "scaling": ["weak"] if nproc == 2 else ["weak", "strong"],
            "params": params, "tokens_per_sec": {"median": tokens_per_sec}, "allreduce_share": share}


def test_findings_on_made_up_numbers():
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
    f = sm.matrix_findings({"runs": runs, "provenance": {"cores": 2}})

    assert f["sizes"] == [small, large] and f["scalings"] == ["weak", "strong"]
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
    sentence = sm.findings_sentence(f)
    assert ("against 1 process using all cores, 2 processes x 1 thread were faster at 0.20M but not "
            "at 5.00M parameters (0.79-1.60x) in weak scaling;") in sentence
    assert ("the lead passes from 2 processes x 1 thread to 1 process using all cores between 0.20M and "
            "5.00M parameters") in sentence and "largest share of a 2-process step was 25% at 5.00M parameters" in sentence
    assert "within the spread" not in sentence and "No lines cross" not in sentence


def test_crossing_inside_the_spread_is_flagged():
    runs = [fake_run(c, n, tps) for n, spread in ((1, 0), (2, 60)) for offset in (-spread, 0, spread)
            for c, tps in ((sm.ONE_THREAD, 100 + (n - 1) * 20 + offset), (sm.TWO_PROCS, 110 + offset))]
    f = sm.matrix_findings({"runs": runs, "provenance": {"cores": 2}})
    assert [(c["faster_before"], c["faster_after"], c["separated"]) for c in f["crossings"]] == [
        (sm.TWO_PROCS, sm.ONE_THREAD, False)]
    assert "1 change(s) of order between neighbouring sizes lie within the spread" in sm.findings_sentence(f)


def test_no_crossing_when_the_order_holds():
    runs = [fake_run(c, n, tps * scale) for n, scale in ((1, 1.0), (2, 0.5), (3, 0.25))
            for c, tps in ((sm.ONE_THREAD, 100), (sm.TWO_PROCS, 200))]
    f = sm.matrix_findings({"runs": runs, "provenance": {"cores": 2}})
    assert f["crossings"] == []
    assert "No lines cross" in sm.findings_sentence(f)
    assert "2 processes x 1 thread were faster at every size (2.00x) in weak scaling" in sm.findings_sentence(f)
