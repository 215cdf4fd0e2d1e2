"""The report's pure parts on made-up inputs: the lesson paragraph's branches (and the checker
accepting each), the verdict over repeats, the manifest as one typed record, and the deeper
measurements' findings read back from JSON files."""

import json
import math
import random
from dataclasses import fields, replace

import pytest

from helpers import PROVENANCE
from minitrain.lab.reporting.stop_conditions import TIMING_FIELDS, check_lesson_notes
from minitrain.lab.reporting.manifest import Manifest, ManifestError
from minitrain.lab.reporting.paragraph import paragraph_problems
from minitrain.lab.reporting.report import beyond_findings, findings_table, set_lesson_notes
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.verdict import chance_of_separation
from minitrain.lab.reporting.verdict import times_compared, verdict_over_repeats
from minitrain.lab.teaching.reference import reference_paragraph
from minitrain.paths import EXPERIMENT_DIR

BATCH, BLOCK = 16, 64
COMMITTED = EXPERIMENT_DIR / "manifest.json"


def manifest(steps_1proc: list[float], steps_2proc: list[float], threads_1proc: int, cores: int,
             share: float, buckets: int = 2, shares: bool = True) -> Manifest:
    """The committed manifest with made-up repeats (median step ms of each), consistent with each
    other as build_manifest makes them (2 ranks x 1 thread); with `shares`, each 2-process repeat's
    all-reduce share (the median one's `share`, the others 0.7x and 1.3x it), as a manifest written before
    the repeats held them without."""
    tokens = BATCH * BLOCK
    tps = {1: [tokens / (ms / 1e3) for ms in steps_1proc], 2: [2 * tokens / (ms / 1e3) for ms in steps_2proc]}
    median = {n: sorted(range(len(tps[n])), key=tps[n].__getitem__)[(len(tps[n]) - 1) // 2] for n in (1, 2)}
    speedups = [b / a for a, b in zip(tps[1], tps[2])]
    m = Manifest.read(COMMITTED)
    return replace(
        m, world_size=2, tokens_per_sec_1proc=tps[1][median[1]], tokens_per_sec_2proc=tps[2][median[2]],
        speedup_2proc=tps[2][median[2]] / tps[1][median[1]], speedup_2proc_range=[min(speedups), max(speedups)],
        verdict=verdict_over_repeats(tps[2], tps[1]),
        repeats=m.repeats | {"count": len(speedups), "speedups": speedups} | {
            f"{n}proc": [{"run_id": f"{n}{i}", "tokens_per_sec": t, "step_p50_ms": s, "command": "made up"}
                         | ({"allreduce_share_of_step": share * (1 if i == median[2] else 0.7 + 0.6 * (i % 2))}
                            if shares and n == 2 else {})
                         for i, (t, s) in enumerate(zip(tps[n], steps))]
            for n, steps in ((1, steps_1proc), (2, steps_2proc))},
        step_p50_ms_1proc=steps_1proc[median[1]], step_p50_ms_2proc=steps_2proc[median[2]],
        allreduce_share_of_step=share, threads_per_rank={"1proc": threads_1proc, "2proc": 1}, cores=cores,
        batch_size_per_rank=BATCH, block_size=BLOCK, gradient_bytes=1_094_016,
        buckets=[{"index": i, "bytes": 1_094_016 // buckets} for i in range(buckets)])


def test_the_manifest_fields_are_the_report_s():
    """One field list: the checker's timing fields are Manifest fields, and the committed manifest
    reads, holds nothing else and writes back unchanged."""
    names = [f.name for f in fields(Manifest)]
    assert set(TIMING_FIELDS) <= set(names)
    assert list(json.loads(COMMITTED.read_text())) == names


def test_committed_manifest_round_trips(tmp_path):
    Manifest.read(COMMITTED).write(tmp_path / "manifest.json")
    assert (tmp_path / "manifest.json").read_text() == COMMITTED.read_text()


def test_set_lesson_notes_keeps_every_other_field(tmp_path):
    (tmp_path / "manifest.json").write_text(COMMITTED.read_text())
    written = set_lesson_notes(tmp_path, "My own paragraph.")
    assert Manifest.read(tmp_path / "manifest.json") == written
    assert written == replace(Manifest.read(COMMITTED), lesson_notes="My own paragraph.")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("verdict"), "manifest.json lacks verdict; re-make it with python -m minitrain.lab.experiment"),
    (lambda d: d.update(speedup=1.0), "manifest.json has unknown fields speedup"),
], ids=["missing", "unknown"])
def test_a_manifest_with_other_fields_is_named(tmp_path, edit, message):
    data = json.loads(COMMITTED.read_text())
    edit(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=message):
        Manifest.read(tmp_path / "manifest.json")


@pytest.mark.parametrize("candidate, baseline, higher_is_faster, expected", [
    ([1.2, 1.1, 1.3], [1.0, 1.05, 0.9], True, "faster"),
    ([0.5, 0.9], [1.0, 1.2], True, "slower"),
    ([1.0, 1.3], [0.9, 1.1], True, "no clear winner"),  # every pair 2-vs-1 above 1, but the ranges overlap
    ([1.0], [1.0], True, "no clear winner"),
    ([50.0, 52.0], [60.0, 55.0], False, "faster"),  # times: lower is faster
    ([61.0, 62.0], [60.0, 55.0], False, "slower"),
])
def test_verdict_needs_the_repeats_ranges_apart(candidate, baseline, higher_is_faster, expected):
    assert verdict_over_repeats(candidate, baseline, higher_is_faster) == expected


@pytest.mark.parametrize("mine, theirs, said", [
    ([1.0, 2.0], [3.0, 4.0], "A is faster than B: each of its 2 repeats beat each of the other's"),
    ([3.0, 4.0], [1.0, 2.0], "A is slower than B: each of its 2 repeats lost to each of the other's"),
    ([1.0, 3.5], [3.0, 4.0], "A is not clearly faster or slower than B by the lab's rule"),
])
def test_times_compared_says_which_side_each_repeat_beat(mine, theirs, said):
    assert times_compared("A is", "B", mine, theirs).startswith(said)


def test_a_verdict_needs_repeats():
    with pytest.raises(ValueError, match="a verdict needs repeats on both sides, got 0 and 2"):
        verdict_over_repeats([], [1.0, 2.0])


FASTER, SLOWER, UNCLEAR = ([100.0, 102.0, 98.0], [160.0, 165.0, 158.0]), \
    ([100.0, 102.0, 98.0], [250.0, 240.0, 260.0]), ([100.0, 90.0, 110.0], [190.0, 200.0, 185.0])
# what each branch of the paragraph's explanation says, and nothing else does
BRANCHES = {
    "no clear winner": "The repeats overlap: 1 process ran at",
    "faster": "all-reduce included, trained more tokens per second than one process of",
    "slower, contention": "threads outnumber the",
    "slower, all-reduce": "for a tiny model: the all-reduce",
    "slower, otherwise": "though the all-reduce is the smaller part",
}


@pytest.mark.parametrize("branch, m, outcome", [
    ("no clear winner", manifest(*UNCLEAR, 2, 2, 0.1), "there is no clear winner on this machine"),
    ("faster", manifest(*FASTER, 2, 2, 0.1), "2 processes were faster here"),
    ("faster", manifest(*FASTER, 1, 2, 0.1, buckets=1), "2 processes were faster here"),
    ("slower, contention", manifest(*SLOWER, 1, 1, 0.1), "2 processes were slower here"),
    ("slower, all-reduce", manifest(*SLOWER, 2, 2, 0.4), "2 processes were slower here"),
    ("slower, otherwise", manifest(*SLOWER, 2, 2, 0.1), "2 processes were slower here"),
    ("slower, otherwise", manifest(*SLOWER, 2, 2, 0.1, shares=False), "2 processes were slower here"),
], ids=["no clear winner", "faster, threads idle", "faster, one thread", "slower, contention", "slower, all-reduce",
         "slower, otherwise", "no shares per repeat"])
def test_reference_paragraph_branches(tmp_path, branch, m, outcome):
    notes = reference_paragraph(m)
    first = ". ".join(notes.split(". ")[:2])
    lo, hi = m.speedup_2proc_range
    for figure in (f"On {m.cores} logical CPUs, repeat by repeat, 2 processes ran {m.paired_speedup():.2f}x the "
                   f"tokens/s of 1 (median; range {lo:.2f}-{hi:.2f}x), so {outcome}",
                   f"The median repeats ran at {m.tokens_per_sec_2proc:,.0f} tokens/s (2 processes) and "
                   f"{m.tokens_per_sec_1proc:,.0f} (1 process): their own ratio is {m.speedup_2proc:.2f}x"):
        assert figure in first, (figure, first)
    # the comparison is the paired ratios' median with their range; the median repeats' tokens/s and per-rank step
    # are said to be theirs, with their own ratio, the one the step's ratio gives (2 / step ratio)
    assert "medians of" not in notes and notes.count("x the tokens/s of 1") == 1
    assert [b for b, words in BRANCHES.items() if words in notes] == [branch]
    ratio = m.step_p50_ms_2proc / m.step_p50_ms_1proc
    assert f"in the median repeats it took {ratio:.2f}x" in notes
    assert math.isclose(2 / ratio, m.speedup_2proc)
    shares = m.allreduce_shares()
    assert (f"took {100 * min(shares):.0f}-{100 * max(shares):.0f}% of a 2-process step over the 3 repeats" if shares
            else f"took {m.allreduce_share_of_step:.0%} of a 2-process step in the median repeat") in notes
    assert f"1.09 MB of gradients ({len(m.buckets)} bucket{'s' if len(m.buckets) > 1 else ''})" in notes
    assert f"on 1 thread against the single process's {m.threads_per_rank['1proc']}" in notes
    assert "(s)" not in notes and "other load" not in notes  # no unmeasured causes of the spread
    for cause in ("contend", "caches", "memory bandwidth"):  # nor of a slower step
        assert cause not in notes
    assert '"2-procesos es más lento"' in notes and "2 processes slower)" in notes and "expected" not in notes  # quoted
    # the stop-condition checker accepts the paragraph it is meant to check
    replace(m, lesson_notes=notes).write(tmp_path / "manifest.json")
    assert check_lesson_notes(tmp_path).startswith(f"states the 2-vs-1 ratio (repeats' median {m.paired_speedup():.2f}x")


def test_no_clear_winner_says_where_the_spread_is():
    m = manifest(*UNCLEAR, 2, 2, 0.1)
    notes = reference_paragraph(m)
    tps1 = sorted(r["tokens_per_sec"] for r in m.repeats["1proc"])
    assert f"1 process ran at {tps1[0]:,.0f}-{tps1[-1]:,.0f} tokens/s (median steps 90.0-110.0 ms)" in notes
    assert "(185.0-200.0 ms), so these repeats cannot tell them apart" in notes


def write(path, data: object) -> None:
    path.write_text(json.dumps(data))


RECORDS = [{"name": "alpha", "value": 0.123456, "unit": "ms", "meaning": "fixed cost of one all-reduce"},
           {"name": "weak_2proc_over_1proc_allcores", "value": [0.79, 1.6], "unit": "ratio range over sizes",
            "meaning": "2 processes over 1"},
           {"name": "buckets", "value": 2, "unit": "buckets", "meaning": "all-reduces per step"},
           {"name": "sent_over_ring_theory", "value": None, "unit": "ratio", "meaning": "no counters"}]


def test_beyond_findings_reads_the_json_files_with_findings(tmp_path):
    beyond = tmp_path / "beyond"
    beyond.mkdir()
    prov = PROVENANCE | {"date": "2025-01-02T03:04:05+00:00", "command": "python -m minitrain.measure.wire --out beyond"}
    write(beyond / "wire.json", {"measurement": "wire", "findings": RECORDS[3:], "provenance": prov, "x": 1})
    write(beyond / "allreduce_bench.json", {"measurement": "allreduce_bench", "findings": RECORDS[:1],
                                            "provenance": prov | {"command": "python -m b"}})
    write(beyond / "old.json", {"measurement": "old", "provenance": prov})  # no findings: not a result
    write(beyond / "list.json", [1, 2, 3])
    write(beyond / "anonymous.json", {"findings": RECORDS, "provenance": prov})  # no measurement name
    (beyond / "notes.txt").write_text("not JSON, not read")
    found = beyond_findings(beyond)
    assert list(found) == ["allreduce_bench", "wire"]  # file order
    assert found["wire"] == {"file": "beyond/wire.json", "date": prov["date"], "command": prov["command"],
                             "findings": RECORDS[3:]}
    assert found["allreduce_bench"]["command"] == "python -m b"
    assert found["allreduce_bench"]["findings"] == RECORDS[:1]
    assert beyond_findings(tmp_path / "missing") == {}
    write(beyond / "wire.json", {"measurement": "wire", "findings": RECORDS, "provenance": {"date": "today"}})
    with pytest.raises(ValueError, match=r"wire.json: its provenance lacks torch, python, .*; re-run python -m "
                                         r"minitrain.measure.wire, or restore the committed file from git"):
        beyond_findings(beyond)


def test_findings_table():
    assert findings_table([Finding(**r) for r in RECORDS]).splitlines() == [
        "alpha                           0.12346 ms: fixed cost of one all-reduce",
        "weak_2proc_over_1proc_allcores  0.79-1.6 ratio range over sizes: 2 processes over 1",
        "buckets                         2 buckets: all-reduces per step",
        "sent_over_ring_theory           None ratio: no counters"]
    assert findings_table([]) == ""


def test_the_reference_paragraph_passes_its_own_check_on_made_up_runs():
    """300 made-up runs (1 or 3 repeats, 5-400 ms steps, 2 processes 0.8-8x slower a step, any share):
    the paragraph the report writes always states what stop condition 4 reads."""
    rng = random.Random(35000)
    for _ in range(300):
        n, step1 = rng.choice([1, 3]), rng.uniform(5, 400)
        step2 = step1 * rng.uniform(0.8, 8)
        m = manifest([step1 * rng.uniform(0.7, 1.3) for _ in range(n)], [step2 * rng.uniform(0.7, 1.3) for _ in range(n)],
                     rng.choice([1, 2]), rng.choice([1, 2, 4]), rng.uniform(0.001, 0.7), rng.choice([1, 2]),
                     rng.choice([True, False]))
        assert paragraph_problems(reference_paragraph(m), m) == [], reference_paragraph(m)


def test_a_clean_split_says_how_often_chance_makes_one():
    """3 repeats a side separate wholly with no real difference 2 times in C(6, 3) = 20: one time in 10."""
    assert chance_of_separation(3, 3) == 0.1 and chance_of_separation(1, 1) == 1.0
    assert "3 repeats a side split this cleanly one time in 10" in reference_paragraph(manifest(*FASTER, 2, 2, 0.1))
    assert "one time in" not in reference_paragraph(manifest(*UNCLEAR, 2, 2, 0.1))


@pytest.mark.parametrize("steps", [FASTER, SLOWER], ids=["faster", "slower"])
def test_notebook_06_prints_the_per_rank_step_ratio_its_example_paragraph_quotes(steps):
    """The figures notebook 06 prints before Block G hold the per-rank step's ratio, 2 processes over 1, the
    one the reference paragraph (and the sheet's example) quotes, and the sheet's quoted expectation, not a paraphrase."""
    from minitrain.lab.notebooks.show import manifest_figures

    m = manifest(*steps, 2, 2, 0.1)
    ratio = f"{m.step_p50_ms_2proc / m.step_p50_ms_1proc:.2f}x"
    assert (f"per-rank step, 2 processes over 1: {ratio} (step_p50_ms_2proc / step_p50_ms_1proc, the median repeats'; "
            f"2 processes win below 2x; 2 over it is their speedup_2proc, {m.speedup_2proc:.2f}x)") in manifest_figures(m)
    assert f"in the median repeats it took {ratio}" in reference_paragraph(m)
    assert "expected the opposite" not in reference_paragraph(m)


def test_the_committed_paragraph_is_the_reference_s_with_one_ratio_and_the_shares_range():
    """The committed lesson_notes: one statistic for 2 against 1 (the paired ratios' median, with their range), the
    all-reduce's share over the repeats, the sheet quoted; the same paragraph on a copy with other repeats."""
    m = Manifest.read(COMMITTED)
    assert m.lesson_notes == reference_paragraph(m)
    shares, (lo, hi) = m.allreduce_shares(), m.speedup_2proc_range
    assert len(shares) == m.repeats["count"] and m.allreduce_share_of_step in shares
    for notes, mm in ((m.lesson_notes, m), (reference_paragraph(altered := manifest(*SLOWER, 2, 2, 0.2)), altered)):
        lo, hi = mm.speedup_2proc_range
        assert f"{mm.paired_speedup():.2f}x the tokens/s of 1 (median; range {lo:.2f}-{hi:.2f}x)" in notes
        shares = mm.allreduce_shares()
        assert f"{100 * min(shares):.0f}-{100 * max(shares):.0f}% of a 2-process step over the" in notes
        assert paragraph_problems(notes, mm) == []


def test_scaling_png_s_title_says_which_ratio_is_which():
    """The left panel's title: the repeats' paired ratios' median with their range, and the bars' own ratio (each
    side's median repeat) named apart, on the committed manifest and on a copy with other repeats."""
    import matplotlib.pyplot as plt

    from minitrain.lab.reporting.report import scaling_figure

    for m in (Manifest.read(COMMITTED), manifest(*SLOWER, 2, 2, 0.2)):
        fig = scaling_figure(m)
        try:
            lo, hi = m.speedup_2proc_range
            assert fig.axes[0].get_title().splitlines()[:2] == [
                f"2 vs 1 process, repeat by repeat: {m.paired_speedup():.2f}x (median; range {lo:.2f}-{hi:.2f}x): "
                f"{m.verdict}", f"thick lines: each side's median repeat (their own ratio {m.speedup_2proc:.2f}x)"]
        finally:
            plt.close(fig)
