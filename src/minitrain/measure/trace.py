"""A profiler trace of a few DDP steps, and how much of each all-reduce overlapped backward.

`profile_steps` saves a gzipped Chrome trace: open it at https://ui.perfetto.dev (Open trace file;
Perfetto reads .json.gz as is). In it, gloo's all-reduce is the `gloo:all_reduce` slice on a gloo
worker thread, backward is the `autograd::engine::evaluate_function: ...` slices on the main one.
"""

import contextlib
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, record_function

from minitrain.artifacts import write_atomic

ALLREDUCE = "gloo:all_reduce"  # ProcessGroupGloo's name for an all-reduce's execution
LAUNCH = "c10d::allreduce_"  # dist.all_reduce's op on the calling thread: it hands the work to gloo's worker
DIVIDE = "aten::div_"  # DDP's all-reduce hook divides the bucket by the world size just before the launch
BACKWARD_OP = "autograd::engine::evaluate_function:"  # one autograd node run during backward
STEP = "step "  # the record_function label profile_steps puts around each step
# kineto (torch 2.13) logs its start and stop at its highest level, USDT, above ERROR: no KINETO_LOG_LEVEL
# hides them without hiding its errors, so they are filtered out of stderr around the start and the stop
KINETO_USDT = re.compile(rb"^USDT:.*\] profiler_(start|stop)\n?$")


@contextlib.contextmanager
def without_kineto_usdt() -> Iterator[None]:
    """Catch what the C++ side writes to stderr (file descriptor 2) meanwhile; write back all but
    kineto's USDT profiler_start/profiler_stop lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = b"".join(line for line in caught if not KINETO_USDT.match(line))
            if kept:
                os.write(2, kept)


def profile_steps(run_step: Callable[[], None], steps: int, path: Path) -> None:
    """Run `steps` training steps under torch.profiler (CPU) and save the trace, gzipped, to `path`."""
    prof = profile(activities=[ProfilerActivity.CPU])
    with without_kineto_usdt():
        prof.start()
    try:
        for i in range(steps):
            with record_function(f"{STEP}{i}"):
                run_step()
    finally:
        with without_kineto_usdt():
            prof.stop()
    plain = Path(path).with_suffix("")  # trace-rank-0.json.gz -> trace-rank-0.json
    prof.export_chrome_trace(str(plain))

    def compress(tmp: Path) -> None:
        with open(plain, "rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)

    write_atomic(Path(path), compress)
    plain.unlink()


def load_trace(path: Path) -> list[dict]:
    """The complete ("X") events of a Chrome trace, gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def base_ns(path: Path) -> int:
    """The trace's baseTimeNanoseconds: its events' `ts` count microseconds from it, on the machine's
    wall clock (CLOCK_REALTIME), so the traces of processes on one machine line up."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return int(json.load(f).get("baseTimeNanoseconds", 0))


def allreduce_spans(events: list[dict], base: int = 0) -> list[dict]:
    """Per profiled step, each all-reduce in launch order: its start and end on the trace's clock (us from
    `base` ns), and, where the hook divided before launching, the division's length and the time from its
    end to gloo's start (ms)."""
    rows = []
    for step in sorted((e for e in events if e["name"].startswith(STEP)), key=lambda e: e["ts"]):
        inside = sorted((e for e in events if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]), key=lambda e: e["ts"])
        launches = [e for e in inside if e["name"] == LAUNCH]
        for k, a in enumerate(e for e in inside if e["name"] == ALLREDUCE):
            # the launch's own thread's last division before it: the hook's div_ of this bucket
            divides = [d for d in inside if d["name"] == DIVIDE and k < len(launches)
                       and d["tid"] == launches[k]["tid"] and d["ts"] <= launches[k]["ts"]]
            div = divides[-1] if divides else None
            rows.append({"step": int(step["name"][len(STEP):]), "allreduce": k,
                         "start_us": base / 1e3 + a["ts"], "end_us": base / 1e3 + a["ts"] + a["dur"],
                         "divide_ms": div["dur"] / 1e3 if div else None,
                         "to_gloo_ms": (a["ts"] - div["ts"] - div["dur"]) / 1e3 if div else None})
    return rows


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping (start, end) intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(interval: tuple[float, float], union: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(interval[1], e) - max(interval[0], s)) for s, e in union)


def overlap_table(events: list[dict]) -> list[dict]:
    """One row per all-reduce of each profiled step, in the order they started (with DDP's buckets:
    one per bucket, in launch order): its length, how much of it ran while backward was still
    computing, when it started against backward's end (negative: before), and its thread (ms)."""
    span = lambda e: (e["ts"], e["ts"] + e["dur"])  # noqa: E731 (microseconds)
    rows = []
    for step in sorted((e for e in events if e["name"].startswith(STEP)), key=lambda e: e["ts"]):
        lo, hi = span(step)
        inside = [e for e in events if lo <= e["ts"] <= hi]
        backward = _union([span(e) for e in inside if e["name"].startswith(BACKWARD_OP)])
        allreduces = sorted((e for e in inside if e["name"] == ALLREDUCE), key=lambda e: e["ts"])
        for k, a in enumerate(allreduces):
            start, end = span(a)
            overlapped = _overlap((start, end), backward)
            rows.append({"step": int(step["name"][len(STEP):]), "allreduce": k,
                         "allreduce_ms": (end - start) / 1e3, "overlapped_ms": overlapped / 1e3,
                         "after_backward_ms": max(0.0, end - backward[-1][1]) / 1e3 if backward else None,
                         "backward_ms": sum(e - s for s, e in backward) / 1e3,
                         "start_ms": (start - backward[-1][1]) / 1e3 if backward else None,
                         "thread": a.get("tid")})
    return rows


def overlapped_share(rows: list[dict]) -> float:
    """The share of all-reduce time that overlapped backward, summed over overlap_table's rows."""
    return sum(r["overlapped_ms"] for r in rows) / sum(r["allreduce_ms"] for r in rows)
