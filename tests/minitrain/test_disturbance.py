"""A busy machine is named, not reported as a result: repeats that disagree far beyond a quiet machine's spread,
or 2 processes above twice one, are marked disturbed in the manifest and in a WARN row of the checker; a quiet
close result stays "no clear winner"; scaling.png draws every point. On run sets written by the lab's writers
(the committed run, or in the student edition the learner's, copied, its repeats' run.json rewritten with
RunRecord) and read by the real report."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from minitrain.lab.notebooks.show import disturbance_warning
from minitrain.lab.reporting.stop_conditions import check_artifacts
from minitrain.lab.reporting.disturbance import RERUN, disturbance
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.report import build_manifest, scaling_figure
from minitrain.lab.reporting.runs import REPEATS_DIR, repeat_dir
from minitrain.paths import EXPERIMENT_DIR, STUDENT_EDITION
from minitrain.run_record import RunRecord

# tokens/s of each repeat, 1 process then 2, paired in run order
BUSY = ([52_523, 6_378, 30_000], [35_190, 59_826, 123_000])  # the learner: 0.67x to 9.38x, one process varying 8x
CONSISTENT_4X = ([12_000, 12_500, 11_800], [49_200, 51_250, 48_380])  # the repeats agree, but 4.1x one process
QUIET_CLOSE = ([46_000, 47_500, 45_200], [45_800, 48_100, 46_900])  # overlapping: no clear winner


@pytest.fixture
def base(committed_run) -> Path:
    """The run set the synthetic ones are made from (tests/conftest.py: skipped in a student tree before make lab)."""
    return committed_run


def run_set(base: Path, tmp_path: Path, tps: tuple[list[float], list[float]]) -> Manifest:
    """`base` copied, its repeats made `tps` (through their median step; a repeat missing copied from the first, one
    beyond removed), and its manifest built and written by the report, as notebook 06 does."""
    out = Path(shutil.copytree(base, tmp_path / "run"))
    for folder in (out / REPEATS_DIR).glob("r*-*proc"):
        if int(folder.name[1:].split("-")[0]) >= len(tps[0]):
            shutil.rmtree(folder)
    for nproc, values in zip((1, 2), tps):
        for repeat, value in enumerate(values):
            if not repeat_dir(out, repeat, nproc).exists():
                shutil.copytree(repeat_dir(out, 0, nproc), repeat_dir(out, repeat, nproc))
            path = repeat_dir(out, repeat, nproc) / "run.json"
            run = RunRecord.read(path)
            tokens = run.batch_size_per_rank * run.block_size * run.world_size
            step = run.summary["step_ms"] | {"median": tokens / value * 1e3}
            replace(run, summary=run.summary | {"step_ms": step}).write(path)
    manifest = build_manifest(out, "test_disturbance")
    manifest.write(out / "manifest.json")
    return manifest


def row(folder: Path, name: str = "quiet machine"):
    [found] = [r for r in check_artifacts(folder) if r.name == name]
    return found


@pytest.mark.parametrize("tps, verdict, words", [
    (BUSY, "no clear winner", ["the 1-process repeats range from 6,378 to 52,523 tokens/s",
                               "the 2-process repeats range from 35,190 to 123,000 tokens/s",
                               "9.38x in repeat 2, 4.10x in repeat 3"]),
    (CONSISTENT_4X, "faster", ["above twice one process (4.10x in repeat 1, 4.10x in repeat 2, 4.10x in repeat 3)"]),
], ids=["repeats-disagree", "above-twice"])
def test_a_disturbed_run_set_is_a_warning_with_its_reason(base, tmp_path, tps, verdict, words):
    m = run_set(base, tmp_path, tps)
    assert [round(r["tokens_per_sec"]) for n in (1, 2) for r in m.repeats[f"{n}proc"]] == [*tps[0], *tps[1]]
    assert m.verdict == verdict  # the verdict is the repeats' as ever: disturbed is said beside it
    recorded = Manifest.read(tmp_path / "run" / "manifest.json").disturbed
    assert recorded == m.disturbed and all(any(w in reason for reason in recorded) for w in words), recorded
    warned = row(tmp_path / "run")
    assert (warned.status, warned.passed) == ("WARN", True)
    assert warned.detail.startswith("disturbed: ") and RERUN in warned.detail
    shown = disturbance_warning(m)
    assert shown.startswith("WARNING, disturbed: ") and "re-measure on a quiet machine" in shown and RERUN in shown
    for told in ("should", "expect", "slower"):  # what a result should be is never the warning's to say
        assert told not in (warned.detail + shown).lower()


def test_a_quiet_close_result_is_no_clear_winner_and_not_disturbed(base, tmp_path):
    m = run_set(base, tmp_path, QUIET_CLOSE)
    assert (m.verdict, m.disturbed) == ("no clear winner", [])
    quiet = row(tmp_path / "run")
    assert (quiet.status, quiet.detail) == ("PASS", "no repeat under half its configuration's fastest: 1 process 45,200-47,500 tokens/s, "
                                                    "2 processes 45,800-48,100")
    assert disturbance_warning(m).startswith("quiet machine: ")


def test_a_manifest_without_the_field_reads_and_is_still_checked(base, tmp_path):
    """Manifests written before `disturbed` read as [] and the checker recomputes it from their repeats."""
    run_set(base, tmp_path, BUSY)
    path = tmp_path / "run" / "manifest.json"
    data = json.loads(path.read_text())
    del data["disturbed"]
    path.write_text(json.dumps(data))
    assert Manifest.read(path).disturbed == []
    assert row(tmp_path / "run").status == "WARN"


@pytest.mark.skipif(STUDENT_EDITION, reason="reads the reference's committed run, made on a quiet machine")
def test_the_quiet_line_says_whether_the_2x_test_ran():
    """Not disturbed: the committed manifest (2 threads against 2 x 1) says 2 processes stayed within 2x; a copy whose
    single process had more threads than the ranks together says that test was not checked, not that it passed."""
    committed = Manifest.read(EXPERIMENT_DIR / "manifest.json")
    assert committed.disturbed == [] and committed.threads_per_rank == {"1proc": 2, "2proc": 1}
    assert "2 processes stayed within twice one process" in disturbance_warning(committed)
    many = replace(committed, threads_per_rank={"1proc": 8, "2proc": 1})
    shown = disturbance_warning(many)
    assert "stayed within" not in shown and "not checked (the single process had 8 threads, more than" in shown
    tps = {n: [r["tokens_per_sec"] for r in committed.repeats[f"{n}proc"]] for n in (1, 2)}
    assert disturbance(tps[1], tps[2], 8, 1) == []


def test_the_ratio_rule_states_its_assumption():
    """Above 2x means a rank's step beat the single process's: the reason says so and what it assumes."""
    (reason,) = disturbance(*CONSISTENT_4X, threads_1proc=2, threads_2proc=1)
    assert "a rank's step (1 per rank, beside the other rank) was shorter than the single process's" in reason
    assert "assuming that does not happen on a quiet machine, about 2x is the most" in reason


def test_the_ratio_rule_needs_no_more_threads_on_the_single_process():
    """Above twice one process is impossible only when the single process had no more threads than the two
    ranks together: a single process of many threads may be slower than one of its ranks' single thread."""
    assert disturbance(*CONSISTENT_4X, threads_1proc=2, threads_2proc=1)
    assert disturbance(*CONSISTENT_4X, threads_1proc=8, threads_2proc=1) == []


@pytest.mark.parametrize("tps", [BUSY, CONSISTENT_4X, QUIET_CLOSE], ids=["busy", "4.1x", "quiet"])
def test_scaling_png_draws_every_point(base, tmp_path, tps):
    import matplotlib.pyplot as plt

    m = run_set(base, tmp_path, tps)
    fig = scaling_figure(m)
    try:
        ax = fig.axes[0]
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        points = [(n, r["tokens_per_sec"]) for n in (1, 2) for r in m.repeats[f"{n}proc"]]
        assert all(x0 < x < x1 and y0 <= y < y1 for x, y in points), ((x0, x1, y0, y1), points)
        assert y1 > 2 * m.tokens_per_sec_1proc  # the ideal line's end too
        assert ("DISTURBED" in ax.get_title()) == bool(m.disturbed)
    finally:
        plt.close(fig)
