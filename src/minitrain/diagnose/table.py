"""Every broken run under every tool, repeated: what each tool names and how many seconds after the fault.

    python -m minitrain.diagnose.table [--repeats 3] [--timeout 2] [--out FILE]

Writes experiments/35-ddp-cpu/diagnose/tools.json, which notebook 16 reads. The seconds depend on the collective
timeout (2 s here; torch's default is 30 minutes, the lab's 60 s) and on the machine's load; whether an answer
names the planted rank, and the planted line, on neither (read from the answers it stores: tools.named).
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from minitrain.diagnose.faults import KINDS, planted
from minitrain.diagnose.tools import ONE_DUMP, TOOLS, named, py_spy, run
from minitrain.paths import EXPERIMENT_DIR, relative

TABLE = EXPERIMENT_DIR / "diagnose" / "tools.json"
COMMAND = "python -m minitrain.diagnose.table"
# what turning each tool on takes, and what its answer names (test_diagnose checks the answers say so)
COSTS = {
    "none": "nothing: torch's default (its timeout is 30 min; the lab's 60 s)",
    "hang_report": "the lab's watch thread, one look every timeout/10 s, 1 s at most (on in every lab run)",
    "monitored_barrier": "a call you add where every rank must pass (gloo only)",
    "detail": "TORCH_DISTRIBUTED_DEBUG=DETAIL: a monitored barrier and two all-gathers before every collective; "
              "DDP crashes on a group it checks (torch 2.13): these runs average by hand (--plain)",
    "flight_recorder": "on by default (TORCH_FR_BUFFER_SIZE entries, 2000); a dump on the way out, which on gloo "
                       "you take yourself; torchfrtrace",
    "faulthandler": "the standard library: a timer re-armed each step (here half the timeout), and enable() for "
                    "crashes",
    "py-spy": "pip install py-spy; the machine must let one process trace another; here a dump every timeout/4 s "
              "until the run ends, each rank's last kept",
    "profiler": "torch.profiler around the steps (it slows them)",
}
ON_DEMAND = {"py-spy"}  # run from outside when you choose: no seconds
NAMES = {"none": "an error line; for a hang, each rank's traceback after the timeout", "hang_report": "rank, line, collective",
         "monitored_barrier": "the rank that did not arrive (rank 0's error); another rank's: only rank 0, to check", "detail": "each rank's op and shapes",
         "flight_recorder": "missing rank or mismatch, collective, sizes, line (one dump: the survivor's last "
                            "collective, no mismatch)",
         "faulthandler": "each rank's line",
         "py-spy": "each rank's line", "profiler": "the late rank"}


def measure(repeats: int, timeout_s: float, echo=print) -> dict:
    """Each KIND under each tool (py-spy where installed), `repeats` times, interleaved."""
    tools = [t for t in COSTS if t != "py-spy" or py_spy()]
    runs = {(k, t): [] for k in KINDS for t in tools}
    for i in range(repeats):
        for kind, tool in runs:
            outcome = run(kind, tool, timeout_s)
            runs[kind, tool].append({"status": outcome.status, "answer": outcome.answer, "seconds": outcome.seconds,
                                     "names_planted": outcome.names(*planted(kind))})
            echo(f"{i + 1}/{repeats} {kind} {tool}: {outcome.seconds} | {outcome.answer}")
    return {"command": COMMAND + (f" --repeats {repeats}" if repeats != 3 else ""), "timeout_s": timeout_s,
            "repeats": repeats, "torch": torch.__version__, "python": platform.python_version(),
            "measured": time.strftime("%Y-%m-%d"), "py_spy": bool(py_spy()),
            "runs": [{"kind": k, "tool": t, "outcomes": o} for (k, t), o in runs.items()]}


def median_seconds(outcomes: list[dict]) -> float | None:
    """The median seconds to the answer over the repeats that gave one; None if fewer than half did."""
    seconds = [o["seconds"] for o in outcomes if o["answer"] and o["seconds"] is not None]
    return statistics.median(seconds) if len(seconds) * 2 >= len(outcomes) else None


def right(kind: str, outcomes: list[dict]) -> str:
    """`rank 2/3, line 1/3`: in how many repeats the answer named `kind`'s planted rank, and its planted line
    ("n/a": no answer named a rank, or a line; "each rank": every answer names every rank; no rank count where
    every rank runs the line); and how many answers came from one dump, which names no mismatch."""
    rank, place = planted(kind)
    found = [named(o["answer"]) for o in outcomes]
    n, counts = len(outcomes), []
    if rank is not None:
        ranks = [r for r in ({r for r, _ in f if r is not None} for f in found) if r]
        counts.append("rank n/a" if not ranks else "each rank" if all(len(r) > 1 for r in ranks)
                      else f"rank {sum(rank in r for r in ranks)}/{n}")
    lines = [w for w in ({w for _, w in f if w} for f in found) if w]
    counts.append(f"line {sum(place in w for w in lines)}/{n}" if lines else "line n/a")
    dumps = sum((o["answer"] or "").startswith(ONE_DUMP) for o in outcomes)
    if dumps:
        counts.append(f"one dump {dumps}/{n}: the survivor's last collective, not the mismatch")
    return ", ".join(counts)


def seconds_table(results: dict) -> str:
    """A markdown table: a row per tool, what it names and costs, then for each broken run the median seconds to
    its answer ("-": no answer; "when run": a tool run from outside, whenever you run it) and in how many repeats
    the answer named the planted rank, and the planted line (`right`: `rank 2/3, line n/a`)."""
    by = {(r["kind"], r["tool"]): r["outcomes"] for r in results["runs"]}
    tools = list(dict.fromkeys(r["tool"] for r in results["runs"]))
    lines = ["| tool | names | to turn it on | " + " | ".join(KINDS) + " |", "|---" * (3 + len(KINDS)) + "|"]
    for tool in tools:
        cells = []
        for kind in KINDS:
            outcomes, s = by[kind, tool], median_seconds(by[kind, tool])
            cells.append("-" if s is None else ("when run" if tool in ON_DEMAND else f"{s:.1f} s") + "; "
                         + right(kind, outcomes))
        row = "detail (`--plain`)" if tool == "detail" else tool
        lines.append(f"| {row} | {NAMES[tool]} | {COSTS[tool]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def answers(results: dict, kind: str) -> dict[str, str]:
    """Each tool's answer for `kind`, from its first repeat that gave one."""
    return {r["tool"]: next((o["answer"] for o in r["outcomes"] if o["answer"]), None)
            for r in results["runs"] if r["kind"] == kind}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Every broken run under every tool: what it names, how fast.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=2.0, help="the collective timeout, seconds (default 2)")
    p.add_argument("--out", type=Path, default=TABLE)
    args = p.parse_args(argv)
    results = measure(args.repeats, args.timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(args.out)  # whole or not at all
    print(seconds_table(results))
    print(f"wrote {relative(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
