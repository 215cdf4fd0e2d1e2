"""A rank dies, training resumes: torchrun's elastic agent restarts both workers, they go on from the
last snapshot, and the final weights are bitwise those of a run that never failed.

    python -m minitrain.measure.restart [--out DIR] [--quick]

train.py under the lab's torchrun with snapshots: uninterrupted; rank 1 killed (SIGKILL) with
`--max-restarts=1`; a second fault past it; and resumes done wrong (the optimizer's state or the data
position left out). Each log line is timed as it arrives; the final state dicts are compared tensor
by tensor. Not a timing measurement: the seconds depend on the machine and its load.
"""

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.launch import LaunchError, run_ranks, run_streaming, torchrun_command
from minitrain.measure.measurement import WORLD_SIZE, Measurement, fresh_folder, runs_folder
from minitrain.measure.restart_figure import PLOT_NAME, plot
from minitrain.measure.resumes import LEFT_OUT, compare_runs, leave_out
from minitrain.paths import BEYOND_DIR, REPO, TRAIN_SCRIPT, relative  # noqa: F401 (BEYOND_DIR: for the notebook)
from minitrain.snapshot import MARKER, SNAPSHOTS, load_rank_state

RUN_TIMEOUT_S = 600
GONE_WITHIN_S = 10  # how long the processes of a failed run get to disappear before one counts as an orphan


@dataclass(frozen=True)
class Plan:
    """The runs' size and faults; the model is train.py's default unless `model` says otherwise."""

    steps: int = 30
    warmup: int = 5
    snapshot_every: int = 10
    fault: str = "25:1"  # STEP:RANK on the first attempt
    second_fault: str = "27:0:1"  # STEP:RANK:ATTEMPT, on the restarted attempt
    model: tuple[str, ...] = ()

    @classmethod
    def quick(cls) -> "Plan":
        """A tiny model and 40 steps (a tiny step costs little next to a launch): for tests and notebooks."""
        return cls(steps=40, warmup=2, snapshot_every=4, fault="6:1", second_fault="7:0:1",
                   model=("--n-layer", "1", "--n-embd", "32"))

    def train_args(self) -> list[str]:
        return ["--steps", str(self.steps), "--warmup", str(self.warmup),
                "--snapshot-every", str(self.snapshot_every), *self.model]


QUICK = Plan.quick()  # the tests' plan

# the restart's events as the log shows them (train.py's lines and torchrun's agent's), each the first
# matching line after the fault; the first step, the first after the resume
EVENTS = [
    ("fault", lambda line: "fault injected:" in line, "a rank kills itself (SIGKILL) as the step begins"),
    ("peer_error", lambda line: "Connection reset by peer" in line,
     "the other rank's all-reduce fails: its peer's socket is gone"),
    ("detected", lambda line: "closing signal" in line or "failed (exitcode" in line,
     "torchrun reports the dead worker, the other one stopped"),
    ("restarted", lambda line: "torchrun's agent restarted the workers" in line, "the agent's new workers run (Python and torch imported)"),
    ("resumed", lambda line: line.startswith("resumed from"),
     "rank 0 has loaded the snapshot and says which (rank 1 loads its own file alongside)"),
    ("first_step", lambda line: line.startswith("step "), "the first step after the resume is done"),
]


# ------------------------------------------------------------------------------------------------
# The runs


class Log:
    """A run's lines as they arrive, each with its time in seconds since the launch."""

    def __init__(self, echo) -> None:
        self.start, self.lines, self.echo = time.monotonic(), [], echo

    def __call__(self, line: str) -> None:
        self.lines.append((time.monotonic() - self.start, line))
        self.echo(line)


def launch(folder: Path, plan: Plan, corpus_dir: Path, *faults: str, echo=print) -> tuple[Log, str | None]:
    """train.py under the lab's torchrun with `--max-restarts=1` and `faults`; its log, and the error
    it ended with (None when it succeeded)."""
    args = [*plan.train_args(), "--out", str(folder), "--corpus-dir", str(corpus_dir)]
    for spec in faults:
        args += ["--fail-at", spec]
    log = Log(echo)
    try:
        if faults:  # the agent's restart is what is measured: the lab's torchrun, always
            command = torchrun_command(TRAIN_SCRIPT, WORLD_SIZE, *args)
            command.insert(command.index(f"--nproc-per-node={WORLD_SIZE}") + 1, "--max-restarts=1")
            run_streaming(command, timeout=RUN_TIMEOUT_S, echo=log)
        else:  # nothing restarts: warm ranks under the tests (run_ranks)
            run_ranks(TRAIN_SCRIPT, WORLD_SIZE, *args, options=("--max-restarts=1",), timeout=RUN_TIMEOUT_S, echo=log)
    except LaunchError as e:
        return log, str(e)
    return log, None


def timeline(log: Log) -> list[dict]:
    """The restart's events in the order they happened, with seconds since the launch and the fault."""
    def first(shows, after: int) -> int | None:
        return next((i for i in range(after, len(log.lines)) if shows(log.lines[i][1])), None)

    fault = first(EVENTS[0][1], 0)
    if fault is None:
        return []
    found = {"fault": fault}
    for name, shows, _ in EVENTS[1:]:
        after = found.get("resumed", len(log.lines)) if name == "first_step" else fault
        if (i := first(shows, after)) is not None:
            found[name] = i
    meaning = {name: text for name, _, text in EVENTS}
    t0 = log.lines[fault][0]
    return sorted(({"event": name, "t_s": log.lines[i][0], "since_fault_s": log.lines[i][0] - t0,
                    "meaning": meaning[name], "line_index": i} for name, i in found.items()),
                  key=lambda e: e["line_index"])


def excerpt(log: Log, events: list[dict], scrub) -> list[dict]:
    """The log from the last step before the fault to the first step after the resume, without empty
    lines and the frames of rank 0's traceback (its last line, the error, stays)."""
    by_name = {e["event"]: e["line_index"] for e in events}
    if "fault" not in by_name:
        return []
    start = max((i for i in range(by_name["fault"]) if log.lines[i][1].startswith("step ")), default=by_name["fault"])
    end = by_name.get("first_step", len(log.lines) - 1)
    kept = []
    for t, line in log.lines[start:end + 1]:
        if not line.strip() or (re.match(r"\[rank\d+\]:", line) and "Error" not in line):
            continue
        kept.append({"t_s": round(t, 3), "line": scrub(line)})
    return kept


def progress(log: Log) -> list[list[float]]:
    """[seconds since the launch, step] for every step line of rank 0's log."""
    return [[round(t, 3), int(m.group(1))] for t, line in log.lines if (m := re.match(r"step +(\d+) \|", line))]


def leftovers(marker: str) -> list[int]:
    """Processes whose command line names `marker` (a run's output folder), after they had a moment to end."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
                    found.append(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def model_contents(model: dict) -> str:
    """A state dict's tensors and values, each storage counted once: a tied matrix is one matrix."""
    by_storage: dict[int, list[str]] = {}
    for name, tensor in model.items():
        by_storage.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    values = sum(model[names[0]].numel() for names in by_storage.values())
    tied = [" and ".join(sorted(names)) for names in by_storage.values() if len(names) > 1]
    note = "".join(f" ({names} are one tied matrix)" for names in tied)
    return f"{len(model)} tensors{note}, {values:,} values"


def snapshot_contents(folder: Path) -> dict:
    """What rank 0's file of a snapshot holds, item by item, and the COMPLETE marker's record."""
    state = load_rank_state(folder, 0)
    model, optimizer = state["model"], state["optimizer"]
    per_param = next(iter(optimizer["state"].values()))
    items = {  # the notebook's table says what a resume without each item does
        "step": {"holds": state["step"]},
        "model": {"holds": model_contents(model)},
        "optimizer": {"holds": f"AdamW state of {len(optimizer['state'])} parameters: {', '.join(sorted(per_param))}"},
        "data": {"holds": state["data"]},
        "rng": {"holds": f"torch {state['rng']['torch'].numel()} bytes, python Mersenne Twister "
                         f"{len(state['rng']['python'][1])} words"},
        "records": {"holds": f"{len(state['records'])} step records"},
        "config": {"holds": state["config"]},
    }
    marker = json.loads((folder / MARKER).read_text())
    return {"folder": folder.name, "items": items,
            "marker": marker | {"files": [f | {"sha256": f["sha256"][:16] + "..."} for f in marker["files"]]}}


def measure(out: Path, plan: Plan, corpus_dir: Path, echo) -> dict:
    """The runs (uninterrupted, one fault, two faults, and resumes with an item left out): restart.json's content."""
    with fresh_folder(runs_folder(out, "restart")) as runs:
        def scrub(line: str) -> str:  # no machine paths in the committed results
            for prefix in (f"{runs}/", f"{relative(runs)}/", f"{REPO}/"):
                line = line.replace(prefix, "")
            return line.replace(sys.executable, "python")

        plain, _ = launch(runs / "uninterrupted", plan, corpus_dir, echo=echo)
        restarted, error = launch(runs / "restarted", plan, corpus_dir, plan.fault, echo=echo)
        if error:
            raise RuntimeError(f"the restarted run failed: {error}")
        second, second_error = launch(runs / "second-fault", plan, corpus_dir, plan.fault, plan.second_fault, echo=echo)
        left = leftovers(str(runs / "second-fault"))
        kept = sorted(f for f in (runs / "uninterrupted" / SNAPSHOTS).glob("step-*") if (f / MARKER).is_file())
        resumed_at = int(kept[0].name.removeprefix("step-"))  # the older of the two it keeps: steps left to differ
        wrong = []
        for item, what in LEFT_OUT.items():  # the same resume, done wrong
            leave_out(runs / "uninterrupted", runs / f"without-{item}", resumed_at, item)
            _, wrong_error = launch(runs / f"without-{item}", plan, corpus_dir, echo=echo)
            if wrong_error:
                raise RuntimeError(f"the resume without {item} failed: {wrong_error}")
            wrong.append({"left_out": item, "what": what} | compare_runs(runs / "uninterrupted", runs / f"without-{item}"))
        for name, log in (("uninterrupted", plain), ("restarted", restarted), ("second-fault", second)):
            (runs / f"{name}.log").write_text("".join(f"{t:8.3f}  {line}\n" for t, line in log.lines))

        events = timeline(restarted)
        run_json = json.loads((runs / "restarted" / "run.json").read_text())
        snapshots = sorted(p for p in (runs / "restarted" / SNAPSHOTS).glob("step-*") if (p / MARKER).is_file())
        error_lines = [line for _, line in second.lines if line.startswith("error: ")]
        status = re.search(r"exited with status (-?\d+)", second_error or "")
        results = {
            "plan": plan.__dict__ | {"model": list(plan.model), "world_size": WORLD_SIZE, "max_restarts": 1},
            "restart": {key: run_json["restart"][key] for key in ("attempt", "max_restarts", "snapshot_every",
                                                                   "resumed_from_step", "previous_steps_done",
                                                                   "steps_redone", "skipped")},
            "timeline": [{k: v for k, v in e.items() if k != "line_index"} for e in events],
            "log_excerpt": excerpt(restarted, events, scrub),
            "comparison": compare_runs(runs / "uninterrupted", runs / "restarted"),
            "snapshot": snapshot_contents(snapshots[-1]),
            "second_fault": {"faults": [plan.fault, plan.second_fault], "failed": second_error is not None,
                             "exit_status": int(status.group(1)) if status else None,
                             "error_lines": [scrub(line) for line in error_lines],
                             "attempts_started": 1 + sum(line.count("torchrun's agent restarted")
                                                         for _, line in second.lines) // WORLD_SIZE,
                             "processes_left": len(left)},
            "done_wrong": {"resumed_from_step": resumed_at, "runs": wrong},
            "progress": {"uninterrupted": progress(plain), "restarted": progress(restarted)},
            "runs": {name: relative(runs / name) for name in ("uninterrupted", "restarted", "second-fault",
                                                               *(f"without-{item}" for item in LEFT_OUT))},
        }
    return results


# ------------------------------------------------------------------------------------------------
# Findings and the notebook's tables


def event_time(results: dict, name: str) -> float | None:
    """Seconds from the fault to event `name` (None if the log did not show it)."""
    return next((e["since_fault_s"] for e in results["timeline"] if e["event"] == name), None)


def findings(results: dict) -> list[Finding]:
    """Bitwise equality, the step resumed from, the work lost, the restart's seconds, the second fault."""
    cmp, restart, second = results["comparison"], results["restart"], results["second_fault"]
    return [
        Finding("ranks_bitwise_equal", sum(r["bitwise_equal"] for r in cmp["ranks"]), f"of {len(cmp['ranks'])} ranks",
                "final state dicts bitwise equal to those of the same run without the fault (torch.equal per tensor)"),
        Finding("max_abs_diff", cmp["max_abs_diff"], "absolute", "largest absolute weight difference from the uninterrupted run"),
        Finding("resumed_from_step", restart["resumed_from_step"], "step", "the newest complete snapshot when rank 1 died"),
        Finding("steps_redone", restart["steps_redone"], "steps", "work lost: steps done after that snapshot, done again"),
        Finding("detected_after", event_time(results, "detected"), "s",
                "from the fault to torchrun's report of the dead worker, the other one stopped"),
        Finding("resumed_after", event_time(results, "resumed"), "s",
                "from the fault to rank 0 having loaded the snapshot (new processes, rendezvous, gloo, corpus, model, load)"),
        Finding("processes_left_after_second_fault", second["processes_left"], "processes",
                "after a second fault, past --max-restarts=1, the run ended with an error: what was left running"),
        *(Finding(f"max_abs_diff_without_{w['left_out']}", w["max_abs_diff"], "absolute",
                  f"the same resume with {w['what']}: largest weight difference from the uninterrupted run")
          for w in results["done_wrong"]["runs"]),
    ]


def what_ran(results: dict) -> str:
    p = results["plan"]
    model = " ".join(p["model"]) or "the default MiniGPT"
    return (f"{p['world_size']} ranks, {p['steps']} steps, a snapshot every {p['snapshot_every']}, {model}; "
            f"fault {p['fault']} (STEP:RANK), --max-restarts={p['max_restarts']}")


def snapshot_table(results: dict) -> str:
    """What rank 0's snapshot file holds, item by item, and the COMPLETE marker's record of every rank's file."""
    snap, marker = results["snapshot"], results["snapshot"]["marker"]
    width = max(map(len, snap["items"]))
    lines = [f"{snap['folder']}/rank-0.pt (each rank writes its own):"]
    lines += [f"  {name:<{width}}  {item['holds']}" for name, item in snap["items"].items()]
    lines.append(f"{snap['folder']}/{MARKER} (rank 0 writes it last): step {marker['step']}, "
                 f"world size {marker['world_size']}")
    lines += [f"  {f['file']}  {f['bytes']:,} bytes  sha256 {f['sha256']}" for f in marker["files"]]
    return "\n".join(lines)


def predict_facts(results: dict) -> str:
    """The fault and the snapshots of the committed run, for the prediction."""
    p = results["plan"]
    step, rank = p["fault"].split(":")[:2]
    return (f"{p['steps']} steps, a snapshot after every {p['snapshot_every']} steps; rank {rank} dies as step {step} "
            f"begins (steps are numbered from 0), and torchrun may restart the workers once")


def log_excerpt(results: dict) -> str:
    """The restarted run's log around the restart, each line with its second since the launch, and
    whether rank 0's all-reduce met the dead peer before the agent's SIGTERM reached it."""
    lines = [f"{e['t_s']:7.2f} s  {e['line']}" for e in results["log_excerpt"]]
    if event_time(results, "peer_error") is not None:
        lines.append("(in this run rank 0's all-reduce reached the dead peer's socket first: "
                     "its `Connection reset by peer` is above)")
    else:
        lines.append("(in this run the agent's SIGTERM reached rank 0 first: no `Connection reset by peer` line)")
    return "\n".join(lines)


def sigterm_lead_ms(results: dict) -> float | None:
    """By torchrun's own log timestamps, how long before its failure report it sent the SIGTERM (None
    if the excerpt lacks either line). The lab's launcher holds the SIGTERM line back until that report."""
    def stamp(text: str) -> float | None:
        line = next((e["line"] for e in results["log_excerpt"] if text in e["line"]), None)
        m = re.search(r" (\d\d):(\d\d):(\d\d\.\d+) ", line or "")
        return (int(m.group(1)) * 60 + int(m.group(2))) * 60 + float(m.group(3)) if m else None

    sent, reported = stamp("closing signal SIGTERM"), stamp("failed (exitcode")
    return None if sent is None or reported is None else (reported - sent) * 1000


def timeline_table(results: dict) -> str:
    """The restart's events: seconds since the fault, and what happened."""
    lines = [f"{'event':<11} {'after the fault':>15}  what"]
    lines += [f"{e['event']:<11} {e['since_fault_s']:13.2f} s  {e['meaning']}" for e in results["timeline"]]
    if (lead := sigterm_lead_ms(results)) is not None:
        lines.append(f"by torchrun's own timestamps its SIGTERM to rank 0 went out {lead:.0f} ms before its report")
    r = results["restart"]
    lines.append(f"resumed from the snapshot at step {r['resumed_from_step']}; the failed attempt had done "
                 f"{r['previous_steps_done']} steps: {r['steps_redone']} done again (attempt {r['attempt']} of "
                 f"at most {r['max_restarts'] + 1})")
    return "\n".join(lines)


def verdict_table(results: dict) -> str:
    """The bitwise comparison with the uninterrupted run, rank by rank, and the loss logs."""
    cmp = results["comparison"]
    lines = [f"rank {r['rank']}: {r['tensors']} tensors, bitwise equal: {r['bitwise_equal']}, "
             f"largest difference {r['max_abs_diff']:.3e}" for r in cmp["ranks"]]
    lines.append(f"losses of all {cmp['steps']} steps equal to the uninterrupted run's: {cmp['losses_equal']}")
    lines.append(f"verdict: the restarted run ended with {'exactly' if cmp['bitwise_equal'] else 'NOT'} the weights "
                 "of the run that never failed")
    return "\n".join(lines)


def done_wrong_table(results: dict) -> str:
    """The same resume with one item of the snapshot left out, against the uninterrupted run."""
    wrong = results["done_wrong"]
    lines = [f"resumed from step {wrong['resumed_from_step']} of the uninterrupted run's snapshot; every run ended "
             "without an error",
             f"{'left out':<10}  {'bitwise equal':>13}  {'largest difference':>18}  {'final loss':>10}  "
             f"{'uninterrupted':>13}"]
    lines += [f"{w['left_out']:<10}  {str(w['bitwise_equal']):>13}  {w['max_abs_diff']:18.3e}  "
              f"{w['final_loss'][1]:10.4f}  {w['final_loss'][0]:13.4f}" for w in wrong["runs"]]
    lower = [w["left_out"] for w in wrong["runs"] if w["final_loss"][1] < w["final_loss"][0]]
    other_batch = "data" in [w["left_out"] for w in wrong["runs"]]  # the stream restarted: another last batch
    lines.append("a final loss is one batch's loss" + (" (without the data item, not the uninterrupted run's batch)"
                                                       if other_batch else "")
                 + (f"; without the {' or the '.join(lower)} item it came out lower" if lower else "")
                 + ": no proof of a resume either way; the bitwise comparison is")
    return "\n".join(lines)


def second_fault_table(results: dict) -> str:
    """The run with a second fault past --max-restarts: its end, its error line, what was left."""
    s = results["second_fault"]
    lines = [f"faults: {', '.join(s['faults'])} (STEP:RANK[:ATTEMPT]); --max-restarts=1",
             f"attempts started: {s['attempts_started']}; the run failed: {s['failed']}, exit status {s['exit_status']}"]
    lines += [f"its error line: {line}" for line in s["error_lines"]]
    lines.append(f"processes of the run left (checked for up to {GONE_WITHIN_S} s): {s['processes_left']}")
    return "\n".join(lines)


def checks(results: dict) -> dict[str, bool]:
    """The facts a run must show on any machine (a live run's show_checks fails naming any that does not)."""
    cmp, second = results["comparison"], results["second_fault"]
    return {
        "after the restart, bitwise equal to the uninterrupted run, losses too": cmp["bitwise_equal"] and cmp["losses_equal"],
        "the second fault ended the run, no process left": second["failed"] and second["processes_left"] == 0,
        "each resume done wrong ended with other weights": not any(w["bitwise_equal"] for w in results["done_wrong"]["runs"]),
    }


def _after_fault(results: dict, name: str) -> str:
    """Seconds from the fault to event `name`, or that the log did not show it."""
    t = event_time(results, name)
    return "not in the log" if t is None else f"{t:.2f} s after the fault"


def takeaway(results: dict) -> str:
    """This run's results, one row each, every number from the results."""
    cmp, r, s = results["comparison"], results["restart"], results["second_fault"]
    step, rank = results["plan"]["fault"].split(":")[:2]
    equal = ("bitwise equal to the uninterrupted run's on every rank" if cmp["bitwise_equal"]
             else f"NOT equal to the uninterrupted run's (largest difference {cmp['max_abs_diff']:.2e})")
    rows = [
        ("fault", f"rank {rank} killed as step {step} began"),
        ("detected", f"{_after_fault(results, 'detected')}, the other worker stopped"),
        ("resumed", f"{_after_fault(results, 'resumed')}, from the snapshot at step {r['resumed_from_step']}"),
        ("first step", _after_fault(results, "first_step")),
        ("steps done twice", f"{r['steps_redone']} (at most {r['snapshot_every']}: a snapshot every {r['snapshot_every']})"),
        ("final weights", f"{equal}; loss log {'identical' if cmp['losses_equal'] else 'different'}"),
        ("second fault", f"exit status {s['exit_status']}, {plural(len(s['error_lines']), 'error line')}, "
                         f"{s['processes_left']} processes left"),
        *((f"without {w['left_out']}", f"{'bitwise equal' if w['bitwise_equal'] else 'other weights'} (largest "
                                       f"difference {w['max_abs_diff']:.2e}), the run ended without an error")
          for w in results["done_wrong"]["runs"]),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {what}" for name, what in rows)


def report(results: dict) -> str:
    """What `python -m` prints: the restart's timeline and the verdict."""
    return timeline_table(results) + "\n" + verdict_table(results)


MEASUREMENT = Measurement("restart", "A rank dies, training resumes: elastic restart from a snapshot, bitwise",
                          "13-a-rank-dies.ipynb", (PLOT_NAME,), measure, findings, plot, report,
                          Plan.quick.__doc__, Plan)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
