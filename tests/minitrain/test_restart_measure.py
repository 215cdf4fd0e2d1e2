"""The restart measurement: one real quick run (the session's, tests/conftest.py; five launches: uninterrupted, one fault, two faults,
two resumes done wrong), and its timeline and log excerpt on a hand-made log. No timing assertions.
Its fault and second-fault runs are also the fault tests of `--fail-at` (tests/faults/test_restart.py
has the other restarts): what their logs and folders show is checked here, once."""

import copy
import json
import re
import sys

import pytest
import torch

from helpers import check_findings, check_provenance
from minitrain.lab.reporting.results_file import plain
from minitrain.measure.restart import (QUICK, Log, checks, excerpt, log_excerpt, model_contents, progress, sigterm_lead_ms,
                                      timeline)
from minitrain.snapshot import SNAPSHOTS, step_folder


def test_the_restarted_run_is_bitwise_the_uninterrupted_one(restart_runs):
    out, results = restart_runs
    fault_step, every = int(QUICK.fault.split(":")[0]), QUICK.snapshot_every
    resumed = fault_step // every * every
    assert results["restart"] | {"skipped": None} == {
        "attempt": 1, "max_restarts": 1, "snapshot_every": every, "resumed_from_step": resumed,
        "previous_steps_done": fault_step, "steps_redone": fault_step - resumed, "skipped": None}
    assert results["comparison"]["bitwise_equal"] and results["comparison"]["losses_equal"]
    assert [e["event"] for e in results["timeline"]][:1] == ["fault"]
    assert {"detected", "restarted", "resumed", "first_step"} <= {e["event"] for e in results["timeline"]}
    # the restart's events in the order they must happen (the peer's error, if any, may come anywhere)
    assert [e["event"] for e in results["timeline"] if e["event"] != "peer_error"] == [
        "fault", "detected", "restarted", "resumed", "first_step"]
    second = results["second_fault"]
    assert second["failed"] and second["exit_status"] not in (0, 2) and second["processes_left"] == 0
    assert len(second["error_lines"]) == 1 and second["error_lines"][0].startswith("error: the run failed, rank 0 ")
    wrong = {w["left_out"]: w for w in results["done_wrong"]["runs"]}
    assert wrong.keys() == {"optimizer", "data"}
    for w in wrong.values():  # done wrong, the resumed run ends elsewhere, silently
        assert not w["bitwise_equal"] and w["max_abs_diff"] > 0 and not w["losses_equal"]
    at = {e["event"]: e["since_fault_s"] for e in results["timeline"]}  # the findings quote the timeline
    check_findings(results["findings"], {
        "ranks_bitwise_equal": 2, "max_abs_diff": 0.0, "resumed_from_step": resumed,
        "steps_redone": fault_step - resumed, "detected_after": at["detected"],
        "resumed_after": at["resumed"], "processes_left_after_second_fault": 0,
        "max_abs_diff_without_optimizer": wrong["optimizer"]["max_abs_diff"],
        "max_abs_diff_without_data": wrong["data"]["max_abs_diff"]})
    check_provenance(results, "minitrain.measure.restart")
    assert json.loads((out / "restart.json").read_text()) == json.loads(json.dumps(plain(results)))
    assert (out / "restart.png").stat().st_size > 0


def run_log(out, name: str) -> str:
    """The log the measurement kept of its run NAME, without the seconds it stamps on each line."""
    text = (out / "restart-runs" / f"{name}.log").read_text()
    return "".join(re.sub(r"^ *\d+\.\d{3}  ", "", line) for line in text.splitlines(keepends=True))


def test_the_fault_flag_kills_a_rank_and_the_agent_restarts_both_workers(restart_runs):
    out, results = restart_runs
    fault, every = int(QUICK.fault.split(":")[0]), QUICK.snapshot_every
    resumed = fault // every * every  # the newest snapshot before the fault
    log = run_log(out, "restarted")
    assert re.search(rf"\[rank 1\] fault injected: pid \d+ kills itself with SIGKILL as step {fault} begins", log)
    assert log.count("torchrun's agent restarted the workers") == 2  # both workers are new
    assert (f"{step_folder(SNAPSHOTS, resumed).name}: step {resumed} of {QUICK.steps} (attempt 1; the previous attempt "
            f"had done {fault} steps: {fault - resumed} redone)") in log
    assert results["restart"]["skipped"] == []  # nothing damaged: the newest snapshot was used


def test_a_second_fault_past_max_restarts_ends_the_run_with_one_error_and_no_orphan(restart_runs):
    out, results = restart_runs
    step, rank, attempt = QUICK.second_fault.split(":")
    log = run_log(out, "second-fault")
    assert results["second_fault"]["exit_status"] == 1  # the launcher's one error line, not a bad argument (2)
    assert log.count("torchrun's agent restarted the workers") == 2  # one restart, then no more
    assert re.search(rf"\[rank {rank}\] fault injected: pid \d+ kills itself with SIGKILL as step {step} begins "
                     rf"\(attempt {attempt}\)", log)
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.match(rf"error: the run failed, rank {rank} \(pid \d+\) was killed by SIGKILL",
                                         errors[0]), log
    assert results["second_fault"]["processes_left"] == 0  # no worker of either attempt runs
    assert not (out / "restart-runs" / "second-fault" / "run.json").exists()


def test_the_live_runs_checks_hold_and_name_a_broken_fact(restart_runs):
    _, results = restart_runs
    assert checks(results) and all(checks(results).values())  # what notebook 13's live run asserts
    broken = copy.deepcopy(results)
    broken["second_fault"]["processes_left"] = 1
    assert checks(broken)["the second fault ended the run, no process left"] is False


def test_the_logs_it_keeps_name_no_machine_path(restart_runs):
    out, results = restart_runs
    kept = "\n".join([e["line"] for e in results["log_excerpt"]] + results["second_fault"]["error_lines"])
    assert "resumed from restarted/snapshots/step-" in kept  # the run's folder, by its name only
    assert str(out) not in kept and sys.executable not in kept


def made_up_log() -> Log:
    log = Log(echo=lambda _: None)
    log.lines = [(t, line) for t, line in enumerate([
        "step    4 | loss 6.1 |  50.0 ms",
        "[rank 1] fault injected: pid 7 kills itself with SIGKILL as step 5 begins (attempt 0)step    5 | loss 6.0 |  50.0 ms",
        "",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "x.py", line 1, in <module>',
        "[rank0]: RuntimeError: Read error: Connection reset by peer.",
        "W1201 api.py:1028] Sending process 6 closing signal SIGTERM",
        "[rank 0] attempt 1: torchrun's agent restarted the workers (pid 8)",
        "[rank 1] attempt 1: torchrun's agent restarted the workers (pid 9)",
        "resumed from OUT/snapshots/step-000004: step 4 of 12 (attempt 1; ...)",
        "step    4 | loss 6.1 |  60.0 ms",
        "step    5 | loss 6.0 |  50.0 ms",
    ])]
    return log


def test_the_timeline_takes_the_first_line_of_each_event_after_the_fault():
    events = timeline(made_up_log())
    assert [(e["event"], e["line_index"], e["since_fault_s"]) for e in events] == [
        ("fault", 1, 0), ("peer_error", 5, 4), ("detected", 6, 5), ("restarted", 7, 6), ("resumed", 9, 8),
        ("first_step", 10, 9)]


def test_the_excerpt_drops_empty_lines_and_traceback_frames():
    log = made_up_log()
    lines = [e["line"] for e in excerpt(log, timeline(log), lambda line: line.replace("OUT/", ""))]
    assert lines[0].startswith("step    4") and lines[-1].startswith("step    4")  # before the fault, after the resume
    assert "" not in lines and not any("File " in line or "Traceback" in line for line in lines)
    assert "[rank0]: RuntimeError: Read error: Connection reset by peer." in lines
    assert "resumed from snapshots/step-000004: step 4 of 12 (attempt 1; ...)" in lines


def test_progress_reads_the_step_lines():
    assert progress(made_up_log()) == [[0, 4], [10, 4], [11, 5]]  # a step run together with another line is lost


def test_a_tied_matrix_is_counted_once():
    shared = torch.zeros(5, 3)
    state = {"tok_emb.weight": shared, "head.weight": shared, "ln.bias": torch.zeros(3)}
    assert model_contents(state) == "3 tensors (head.weight and tok_emb.weight are one tied matrix), 18 values"
    assert model_contents({"a": torch.zeros(5, 3), "b": torch.zeros(5, 3)}) == "2 tensors, 30 values"


def test_the_sigterm_lead_and_the_peer_error_note_come_from_the_log():
    lines = ["W1201 13:50:29.081000 21028 api.py:1028] Sending process 21035 closing signal SIGTERM",
             "E1201 13:50:29.146000 21028 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 21036)"]
    results = {"log_excerpt": [{"t_s": 8.66, "line": line} for line in lines],
               "timeline": [{"event": "fault", "since_fault_s": 0.0}]}
    assert sigterm_lead_ms(results) == pytest.approx(65.0)
    assert log_excerpt(results).endswith("no `Connection reset by peer` line)")
    results["timeline"].append({"event": "peer_error", "since_fault_s": 0.1})
    assert "its `Connection reset by peer` is above" in log_excerpt(results)
    assert sigterm_lead_ms({"log_excerpt": results["log_excerpt"][1:]}) is None  # no SIGTERM sent: no lead


def test_the_done_wrong_table_does_not_judge_a_resume_by_one_batchs_loss():
    """Committed restart.json: both wrong resumes ended lower, one of them on another batch; the table names
    what a final loss is and does not call it better. A copy whose losses came out higher says no "lower"."""
    from minitrain.measure.restart import MEASUREMENT, done_wrong_table

    results = MEASUREMENT.load()
    table = done_wrong_table(results)
    lower = [w["left_out"] for w in results["done_wrong"]["runs"] if w["final_loss"][1] < w["final_loss"][0]]
    assert "a final loss is one batch's loss (without the data item, not the uninterrupted run's batch)" in table
    assert (f"without the {' or the '.join(lower)} item it came out lower" in table) == bool(lower)
    assert "even lower" not in table and "no proof of a resume either way" in table
    higher = copy.deepcopy(results)
    for w in higher["done_wrong"]["runs"]:
        w["final_loss"][1] = w["final_loss"][0] + 0.1
    assert "came out lower" not in done_wrong_table(higher) and "no proof of a resume either way" in done_wrong_table(higher)
    no_data = copy.deepcopy(results)
    no_data["done_wrong"]["runs"] = [w for w in no_data["done_wrong"]["runs"] if w["left_out"] != "data"]
    assert "not the uninterrupted run's batch" not in done_wrong_table(no_data)
