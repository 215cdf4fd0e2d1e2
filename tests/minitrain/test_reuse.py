"""make lab's finish converges: the runs already in the output folder are reused when complete and of the same
configuration, measured again otherwise (saying why); the load is checked before measuring; every failure ends
with where the executed notebooks are and the one next step. On copies of the session's real experiment
(conftest.py), with real repeats measured again."""

import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import EXPERIMENT_REPEATS as REPEATS, EXPERIMENT_STEPS as STEPS, EXPERIMENT_WARMUP as WARMUP
from minitrain.lab.reporting.stop_conditions import check_folder
from minitrain.lab.reporting.runs import REPEATS_DIR, read_repeats, read_run, repeat_dir, run_dir_in
from minitrain.lab.running import make_lab
from minitrain.lab.running.load import IDLE_LOAD, Load, measure_load, wait_until_quiet
from minitrain.lab.running.reuse import plan_runs
from minitrain.run_record import RunRecord


@pytest.fixture
def out(experiment_run, tmp_path) -> Path:
    """A copy of the session's real experiment that one test may change."""
    return Path(shutil.copytree(experiment_run, tmp_path / "run"))


def test_a_complete_run_set_of_the_same_configuration_is_reused(out):
    plan = plan_runs(out, STEPS, WARMUP, REPEATS, remeasure=False)
    assert plan.nothing_to_measure
    # a fourth line, when the reused repeats look disturbed, depends on this machine's load meanwhile
    assert [line.split(": ", 1)[1] for line in plan.lines(out, REPEATS)[:3]] == \
        ["reused, complete and of this configuration"] * 3


def test_remeasure_measures_everything(out):
    plan = plan_runs(out, STEPS, WARMUP, REPEATS, remeasure=True)
    assert (plan.sheet, plan.repeats) == ({1: "--remeasure", 2: "--remeasure"}, "--remeasure")


def rewrite(folder: Path, **changes) -> None:
    """run.json rewritten by its own writer, with `changes`."""
    replace(RunRecord.read(folder / "run.json"), **changes).write(folder / "run.json")


@pytest.mark.parametrize("spoil, part, why", [
    (lambda out: (out / "state-rank-1.pt").unlink(), 2, "incomplete: state-rank-1.pt missing or empty"),
    (lambda out: (out / "state-rank-1.pt").write_bytes(b""), 2, "incomplete: state-rank-1.pt missing or empty"),
    (lambda out: (out / ".staging-2proc").mkdir(), 2,
     "incomplete: .staging-2proc/ is left by a run that did not finish moving its files"),
    (lambda out: (run_dir_in(out, 1) / "run.json").unlink(), 1, "missing"),
    (lambda out: (run_dir_in(out, 1) / "timings.jsonl").write_text(
        "".join((run_dir_in(out, 1) / "timings.jsonl").read_text().splitlines(True)[:5])), 1,
     f"incomplete: timings.jsonl holds 5 steps, run.json says {STEPS}"),
    (lambda out: (run_dir_in(out, 1) / "run.json").write_text("{}"), 1, "unreadable: "),
    (lambda out: rewrite(out, comm="noop", timing=["hook"]), 2,
     "another configuration: timing ['hook'], not ['barrier', 'hook']; comm 'noop', not 'allreduce'"),
    (lambda out: (repeat_dir(out, 1, 2) / "timings.jsonl").unlink(), "repeats",
     "r1-2proc incomplete: timings.jsonl missing or empty"),
    (lambda out: rewrite(repeat_dir(out, 0, 1), no_sync=True), "repeats",
     "r0-1proc another configuration: no_sync True, not False"),
    (lambda out: shutil.copytree(repeat_dir(out, 0, 1), repeat_dir(out, 7, 1)), "repeats",
     f"1 repeat folder(s) beyond the {REPEATS} of each asked for: r7-1proc"),
], ids=["state-gone", "state-empty", "staging-left", "run-json-gone", "timings-short", "run-json-bad",
        "other-options", "repeat-incomplete", "repeat-other-options", "repeat-extra"])
def test_an_incomplete_or_other_run_is_measured_again_saying_why(out, spoil, part, why):
    spoil(out)
    plan = plan_runs(out, STEPS, WARMUP, REPEATS, remeasure=False)
    found = {1: plan.sheet[1], 2: plan.sheet[2], "repeats": plan.repeats}
    assert found.pop(part).startswith(why), plan
    assert set(found.values()) == {None}, plan  # only that part: the others are reused


def test_other_steps_warmup_or_repeats_are_another_configuration(out):
    plan = plan_runs(out, 100, 50, REPEATS + 1, remeasure=False)
    assert plan.sheet[1] == plan.sheet[2] == f"another configuration: steps {STEPS}, not 100; warmup_steps {WARMUP}, not 50"
    assert plan.repeats == f"r0-1proc another configuration: steps {STEPS}, not 100; warmup_steps {WARMUP}, not 50"
    assert plan_runs(out, STEPS, WARMUP, REPEATS + 1, remeasure=False).repeats == f"r{REPEATS}-1proc missing"


def run_ids(out: Path) -> dict:
    return {"sheet": [read_run(run_dir_in(out, n))[0].run_id for n in (1, 2)],
            "repeats": [r.run_id for n, runs in read_repeats(out).items() for r in runs]}


def test_make_lab_measures_only_what_is_missing(out, capsys):
    """One repeat left incomplete and a stale one beyond the count: the repeats are measured again as a set
    (real jobs), the stale one removed, the sheet's runs reused as they are; then nothing is left to measure."""
    (repeat_dir(out, 1, 2) / "timings.jsonl").unlink()
    shutil.copytree(repeat_dir(out, 0, 1), repeat_dir(out, REPEATS, 1))
    before = run_ids(out)
    assert make_lab.measured_phase(out, REPEATS, remeasure=False, busy_ok=True, steps=STEPS, warmup=WARMUP) is False
    after = run_ids(out)
    assert after["sheet"] == before["sheet"]
    assert len(after["repeats"]) == 2 * REPEATS and not set(after["repeats"]) & set(before["repeats"])
    assert sorted(p.name for p in (out / REPEATS_DIR).iterdir()) == \
        sorted(repeat_dir(out, r, n).name for r in range(REPEATS) for n in (1, 2))
    said = capsys.readouterr().out
    assert "the repeats (2 of each): to measure (r1-2proc incomplete: timings.jsonl missing or empty)" in said
    assert "the sheet's 2-process run: reused, complete and of this configuration" in said
    assert make_lab.measured_phase(out, REPEATS, remeasure=False, steps=STEPS, warmup=WARMUP) is False
    assert "nothing to measure" in capsys.readouterr().out
    assert run_ids(out) == after


def test_notebooks_only_and_remeasure_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        make_lab.main(["--notebooks-only", "--remeasure"])
    assert e.value.code == 2
    assert "--notebooks-only makes no runs, --remeasure measures them all: choose one" in capsys.readouterr().err


def test_every_failure_ends_with_the_executed_notebooks_and_the_next_step(out, capsys):
    assert make_lab.failed("something broke", "do this", out) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "FAILED: something broke"
    assert lines[-2].startswith(f"executed notebooks: {make_lab.relative(make_lab.EXECUTED_DIR)}/ (the runs': ")
    assert str(out / "single-process" / "run-1proc.ipynb") in lines[-2] and lines[-1] == "next: do this"


def test_each_checker_row_has_its_next_step(tmp_path):
    rows = check_folder(tmp_path, run_tests=False)  # an empty folder: every row that can fail fails
    assert [r.status for r in rows if r.name == "quiet machine"] == ["SKIPPED"]  # a warning at most, never a FAIL
    names = [r.name for r in rows if r.name != "quiet machine"]
    assert set(names) <= set(make_lab.ROW_STEPS), set(names) - set(make_lab.ROW_STEPS)
    lesson_notes = make_lab.ROW_STEPS["lesson notes"]
    assert "--notebooks-only" in lesson_notes and "notebook 06" in lesson_notes


@pytest.mark.parametrize("load, busy", [
    (Load(average_1min=3.6, others_now=1.9), True),  # the learner: other work on both CPUs
    (Load(average_1min=3.0, others_now=0.1), False),  # a job that just ended: its average lingers
    (Load(average_1min=0.2, others_now=1.9), False),  # a moment's burst
    (Load(average_1min=IDLE_LOAD, others_now=IDLE_LOAD), False),
])
def test_busy_when_the_load_average_and_the_sample_both_say_so(load, busy):
    assert load.busy is busy
    assert str(load).endswith(f"busy only when both exceed {IDLE_LOAD}")


def test_the_load_is_measured_and_said(capsys):
    load = measure_load(sample_s=0.2)
    assert all(math.isfinite(v) and v >= 0 for v in (load.average_1min, load.others_now))
    said: list[str] = []
    assert isinstance(wait_until_quiet(busy_ok=True, echo=said.append), Load)
    assert len(said) == 1 and said[0].startswith(("the machine is quiet (", "WARNING: the machine is busy ("))



def test_the_lab_s_repeats_go_only_to_the_notebook_that_reads_them():
    """make lab gives `repeats` (the experiment's count) to each notebook that declares it: a notebook with repeats of
    its own names them otherwise (notebook 17's timed calls, once run with the experiment's 3 instead of its 7)."""
    from minitrain.paths import NOTEBOOKS_DIR
    given = {nb.name: make_lab.lab_parameters(nb.name, 5) for nb in sorted(NOTEBOOKS_DIR.glob("[0-9]*.ipynb"))}
    assert [name for name, parameters in given.items() if "repeats" in parameters] == ["06-scaling-and-report.ipynb"]
