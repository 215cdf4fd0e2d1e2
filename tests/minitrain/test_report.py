"""The report's pure parts on made-up inputs: the lesson paragraph's branches (and the checker
accepting each), and the deeper measurements' findings read back from JSON files."""

import json

import pytest

from minitrain.lab.check import check_lesson_notes
from minitrain.lab.report import beyond_findings, findings_table, lesson_notes, verdict

BATCH, BLOCK = 16, 64


def manifest(step_1proc: float, step_2proc: float, speedups: list[float], threads_1proc: int, cores: int,
             share: float) -> dict:
    """The manifest fields lesson_notes reads, consistent with each other (2 ranks x 1 thread)."""
    tokens = BATCH * BLOCK
    tps1, tps2 = tokens / (step_1proc / 1e3), 2 * tokens / (step_2proc / 1e3)
    return {"world_size": 2, "tokens_per_sec_1proc": tps1, "tokens_per_sec_2proc": tps2,
            "speedup_2proc": tps2 / tps1, "speedup_2proc_range": [min(speedups), max(speedups)],
            "verdict": verdict(speedups), "repeats": {"count": len(speedups), "speedups": speedups},
            "allreduce_share_of_step": share, "threads_per_rank": {"1proc": threads_1proc, "2proc": 1},
            "cores": cores, "batch_size_per_rank": BATCH, "block_size": BLOCK, "gradient_bytes": 1_094_016,
            "buckets": [{"index": 0}, {"index": 1}], "step_p50_ms_1proc": step_1proc,
            "step_p50_ms_2proc": step_2proc}


@pytest.mark.parametrize("speedups, expected", [
    ([1.2, 1.1, 1.3], "faster"), ([0.5, 0.9], "slower"), ([0.9, 1.1, 1.05], "no clear winner"),
    ([1.0], "no clear winner"), ([1.01], "faster"),
])
def test_verdict_needs_every_repeat_on_one_side_of_1(speedups, expected):
    assert verdict(speedups) == expected


FASTER, SLOWER, UNCLEAR = [1.2, 1.25, 1.3], [0.7, 0.8, 0.9], [0.9, 1.05, 1.1]
# what each branch of the paragraph's explanation says, and nothing else does
BRANCHES = {
    "no clear winner": "The repeats disagree on the sign",
    "faster, threads idle": "split each small operation of one step",
    "faster, one thread": "The single process ran 1 thread, so a second process could use compute",
    "slower, contention": "the ranks' threads outnumber the logical CPUs",
    "slower, all-reduce": "As the sheet expected for a tiny model",
    "slower, otherwise": "though the all-reduce is the smaller part",
}


@pytest.mark.parametrize("branch, m, outcome", [
    ("no clear winner", manifest(100.0, 190.0, UNCLEAR, 2, 2, 0.1), "there is no clear winner on this machine"),
    ("faster, threads idle", manifest(100.0, 160.0, FASTER, 2, 2, 0.1), "2 processes were faster here"),
    ("faster, one thread", manifest(100.0, 160.0, FASTER, 1, 2, 0.1), "2 processes were faster here"),
    ("slower, contention", manifest(100.0, 250.0, SLOWER, 1, 1, 0.1), "2 processes were slower here"),
    ("slower, all-reduce", manifest(100.0, 250.0, SLOWER, 2, 2, 0.4), "2 processes were slower here"),
    ("slower, otherwise", manifest(100.0, 250.0, SLOWER, 2, 2, 0.1), "2 processes were slower here"),
], ids=list(BRANCHES))
def test_lesson_notes_branches(tmp_path, branch, m, outcome):
    notes = lesson_notes(m)
    first = notes.split(". ")[0]
    lo, hi = m["speedup_2proc_range"]
    for figure in (f"On {m['cores']} logical CPUs", f"{m['tokens_per_sec_2proc']:,.0f} tokens/s",
                   f"against {m['tokens_per_sec_1proc']:,.0f} for 1 process", f"{m['speedup_2proc']:.2f}x",
                   f"medians of {len(m['repeats']['speedups'])} alternating repeats", f"range {lo:.2f}-{hi:.2f}x",
                   f"so {outcome}"):
        assert figure in first, (figure, first)
    assert [b for b, words in BRANCHES.items() if words in notes] == [branch]
    ratio = m["step_p50_ms_2proc"] / m["step_p50_ms_1proc"]
    assert f"here it took {ratio:.2f}x" in notes
    assert f"took {m['allreduce_share_of_step']:.0%} of a 2-process step" in notes
    assert "1.09 MB of gradients (2 bucket(s))" in notes
    assert f"on 1 thread(s) against the single process's {m['threads_per_rank']['1proc']}" in notes
    # the stop-condition checker accepts the paragraph it is meant to check
    (tmp_path / "manifest.json").write_text(json.dumps(m | {"lesson_notes": notes}))
    assert check_lesson_notes(tmp_path).startswith(f"cites {m['speedup_2proc']:.2f}x")


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
    prov = {"date": "2025-01-02T03:04:05+00:00", "command": "python -m minitrain.measure.wire --out beyond",
            "torch": "2.13.0"}
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


def test_findings_table():
    assert findings_table(RECORDS).splitlines() == [
        "alpha                           0.12346 ms: fixed cost of one all-reduce",
        "weak_2proc_over_1proc_allcores  0.79-1.6 ratio range over sizes: 2 processes over 1",
        "buckets                         2 buckets: all-reduces per step",
        "sent_over_ring_theory           None ratio: no counters"]
    assert findings_table([]) == ""
