"""The scratch measurement: one real quick run (2 gloo ranks under the lab's torchrun) into a temporary
folder; its results file, findings and figure. Correctness only: the all-reduces each level makes, never speed."""

import json
import statistics

import pytest

from helpers import check_findings, check_provenance
from minitrain.lab.reporting.results_file import plain
from minitrain.lab.reporting.verdict import VERDICTS
from minitrain.measure.scratch import (BASE, LEVELS, MEASUREMENT, PLOT_NAME, allreduce_table, block_medians,
                                      compared_text, step_verdict, wait_verdict)
from minitrain.measure.trace import KINETO_USDT

# MiniGPT's all-reduces per step: one per parameter with a gradient, or one per bucket
ALLREDUCES = {"torch DDP": 1, "NaiveDDP": 28, "OverlappedDDP": 28, "BucketedDDP": 1, "torch DDP, 0.25 MiB": 4,
              "BucketedDDP, 0.25 MiB": 6}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("scratch")
    return out, MEASUREMENT.run(out, quick=True, corpus_dir=corpus_dir, echo=lambda _: None, repeats=4)


def test_every_level_sends_its_all_reduces_and_is_timed(quick_run):
    out, results = quick_run
    levels = {level["name"]: level for level in results["levels"]}
    assert list(levels) == list(LEVELS) == list(ALLREDUCES)
    assert {name: level["allreduces"] for name, level in levels.items()} == ALLREDUCES
    for level in levels.values():
        assert len(level["numels"]) == level["allreduces"] and level["same_allreduces_on_every_rank"]
        assert sum(level["numels"]) == results["gradient_elements"]  # every gradient, once
        assert level["step_ms"] > 0 and len(level["step_ms_per_rank"]) == results["config"]["world_size"] == 2
        assert [len(rank) for rank in level["step_ms_rounds"]] == [4, 4]  # every rank, every timed round
        assert level["vs_torch_ddp"] is None if level["name"] == BASE else level["vs_torch_ddp"] in VERDICTS
        assert 0 <= level["overlapped_share"] <= 1
        assert {r["rank"] for r in level["overlap_rows"]} == {0, 1}
        profiled = {r["step"] for r in level["overlap_rows"]}
        assert len(level["overlap_rows"]) == level["allreduces"] * len(profiled) * 2  # each all-reduce, each rank
    assert levels[BASE]["over_torch_ddp"] == 1.0
    assert [name for name, level in levels.items() if level["finish_ms"] is None] == [BASE, "torch DDP, 0.25 MiB"]
    for level in levels.values():  # every rank's finish() round by round, next to the steps; rank 0's median
        rounds = level["finish_ms_rounds"]
        assert rounds is None if level["finish_ms"] is None else (
            [len(rank) for rank in rounds] == [4, 4] and level["finish_ms"] == statistics.median(rounds[0]))
    assert max(levels["BucketedDDP, 0.25 MiB"]["numels"]) * 4 <= 0.25 * 1024 * 1024  # at most the cap
    assert results["config"]["plan"] == {"warmup": 2, "repeats": 4, "profiled": 1}  # --repeats over the quick plan

    small = "BucketedDDP, 0.25 MiB"
    expected = {f"{key}_over_torch_ddp": levels[name]["over_torch_ddp"]
                for key, name in [("naive", "NaiveDDP"), ("overlapped", "OverlappedDDP"), ("bucketed", "BucketedDDP"),
                                  ("torch_ddp_small_cap", "torch DDP, 0.25 MiB"), ("bucketed_small_cap", small)]}
    check_findings(results["findings"], expected | {
        "allreduces_per_parameter": 28, "allreduces_torch_ddp_small_cap": 4, "allreduces_bucketed_small_cap": 6,
        "overlapped_share_overlapped": levels["OverlappedDDP"]["overlapped_share"],
        "overlapped_share_bucketed_small_cap": levels[small]["overlapped_share"],
        "overlapped_share_torch_ddp_small_cap": levels["torch DDP, 0.25 MiB"]["overlapped_share"]})
    prov = check_provenance(results, MEASUREMENT.module)
    words = prov.command.split()  # the command repeats the run: quick, 4 rounds
    assert "--quick" in words and words[words.index("--repeats") + 1] == "4"
    assert json.loads((out / MEASUREMENT.result_file).read_text()) == json.loads(json.dumps(plain(results)))
    assert (out / PLOT_NAME).stat().st_size > 0


def test_the_notebook_tables_and_sentences_follow_the_results(quick_run):
    _, results = quick_run
    rows = allreduce_table(results).splitlines()
    assert rows[2].split()[:2] == ["NaiveDDP", "28"] and rows[-1].endswith("on every rank: True")
    said = compared_text(results).splitlines()
    naive, over = results["levels"][1], results["levels"][2]
    assert "NaiveDDP's finish() (28 all-reduces, after backward)" in said[0]
    assert f"waited {naive['finish_ms']:.1f} ms" in said[0]  # the run's numbers, not typed ones
    verdict = step_verdict(over, naive)
    assert f"the step took {over['step_ms']:.1f} against {naive['step_ms']:.1f} ms ({verdict} over" in said[1]
    wait = wait_verdict(over, naive)  # the rounds are recorded: a verdict, never "no verdict"
    assert f"against {naive['finish_ms']:.1f} ms ({wait} over both ranks' block medians)" in said[1]
    assert "no verdict" not in said[1]
    lesson = wait == "shorter" and verdict != "faster"  # said only when the data show it
    assert ("shortened the wait after it, not the step" in said[1]) == lesson
    assert len(block_medians(naive["step_ms_rounds"])) == 8  # --repeats 4: fewer rounds than blocks, one a block


def test_backward_is_called_longer_only_beyond_the_noise_rule():
    """The committed run: OverlappedDDP's profiled backward above NaiveDDP's in every sample, stated as a
    correlation; a copy whose samples overlap gets no such sentence, and no cause."""
    import copy

    from minitrain.measure import scratch

    results = MEASUREMENT.load()
    levels = scratch.by_name(results)
    over, naive = levels["OverlappedDDP"], levels["NaiveDDP"]
    said = compared_text(results)
    apart = min(scratch.backward_samples(over)) > max(scratch.backward_samples(naive))
    assert ("Backward was longer in every profiled (step, rank) than NaiveDDP's in any" in said) == apart
    assert "backward itself took longer" not in said
    mixed = copy.deepcopy(results)
    mixed_over = scratch.by_name(mixed)["OverlappedDDP"]
    first = (mixed_over["overlap_rows"][0]["rank"], mixed_over["overlap_rows"][0]["step"])
    for row in mixed_over["overlap_rows"]:  # one (rank, step) as fast as NaiveDDP's fastest: the ranges overlap
        if (row["rank"], row["step"]) == first:
            row["backward_ms"] = min(scratch.backward_samples(naive))
    text = compared_text(mixed)
    assert "shortened the wait" not in text  # the committed run keeps no finish() rounds: no verdict on the wait
    assert "overlap NaiveDDP's: no clear difference" in text and "longer in every" not in text


def test_only_kinetos_start_and_stop_lines_are_filtered():
    assert KINETO_USDT.match(b"USDT:2026-12-01 23:27:19 4352:4352 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
    assert KINETO_USDT.match(b"USDT:2026-12-01 23:27:19 4352:4352 SyncActivityProfilerHandler.cpp:59] profiler_stop")
    assert not KINETO_USDT.match(b"ERROR:2026-12-01 23:27:19 4352:4352 ActivityProfiler.cpp:1] profiler_start\n")
    assert not KINETO_USDT.match(b"[W socket.cpp:755] a real warning\n")


def test_help_names_the_options(capsys):
    with pytest.raises(SystemExit) as e:
        MEASUREMENT.main(["--help"])
    assert e.value.code == 0
    printed = capsys.readouterr().out
    assert all(option in printed for option in ("--quick", "--out", "--corpus-dir", "--repeats"))
    assert "--worker" not in printed  # the ranks' own option, hidden
