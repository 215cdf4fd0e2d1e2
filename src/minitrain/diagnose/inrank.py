"""The tools inside a rank, turned on by the launcher's environment: `with diagnosed() as tools:` initializes the
gloo group on loopback with the collective timeout, turns on $MINITRAIN_DIAGNOSE_TOOL, and `tools.step(i)` at each
step's start is where a per-step tool hooks in. What a tool leaves behind goes to $MINITRAIN_DIAGNOSE_OUT."""

import contextlib
import faulthandler
import json
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.cli import collective_timeout_s
from minitrain.gloo_setup import loopback_interface
from minitrain.hang_report import GLOO_GRACE, watch_collectives

TOOL, OUT = "MINITRAIN_DIAGNOSE_TOOL", "MINITRAIN_DIAGNOSE_OUT"
IN_RANK = ("none", "hang_report", "monitored_barrier", "detail", "flight_recorder", "faulthandler", "profiler")


class Tools:
    """One rank's tool: `step(i)` as each step starts; `fault()` marks when this rank's planted mistake happens."""

    def __init__(self, tool: str, rank: int, out: Path | None, timeout: timedelta) -> None:
        self.tool, self.rank, self.out, self.timeout = tool, rank, out, timeout
        self.stacks = None

    def step(self, step: int) -> None:
        if self.tool == "monitored_barrier":  # every rank must reach it: gloo names the one that does not
            dist.monitored_barrier(timeout=self.timeout)
        if self.tool == "faulthandler":  # every thread's stack, if this step lasts half the timeout: before gloo's
            faulthandler.dump_traceback_later(self.timeout.total_seconds() / 2, file=self.stacks)  # timeout ends it

    def fault(self) -> None:
        """Write when this rank's mistake happens (once), for the seconds from the fault to a tool's answer."""
        path = self.out / f"fault-rank-{self.rank}.txt" if self.out else None
        if path and not path.exists():
            path.write_text(f"{time.time():.6f}\n")


@contextlib.contextmanager
def diagnosed() -> Iterator[Tools]:
    """This rank in a gloo group on loopback, its tool on (from the environment); at the end, its files written."""
    tool, out = os.environ.get(TOOL, "none"), Path(os.environ[OUT]) if os.environ.get(OUT) else None
    if tool not in IN_RANK:
        raise ValueError(f"{TOOL}={tool} is not one of {', '.join(IN_RANK)}")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    rank = int(os.environ["RANK"])
    timeout = timedelta(seconds=collective_timeout_s())
    tools = Tools(tool, rank, out, timeout)
    group_timeout = timeout
    if tool == "hang_report":  # the lab's watch names the hang; gloo's own timeout comes later
        watch_collectives(rank, timeout.total_seconds())
        group_timeout += GLOO_GRACE
    if tool == "faulthandler":
        tools.stacks = open(out / f"stacks-rank-{rank}.txt", "w")
        faulthandler.enable(file=tools.stacks, all_threads=True)  # and on a crash (an abort in gloo's thread)
    if out:
        (out / f"pid-rank-{rank}.txt").write_text(f"{os.getpid()}\n")
    dist.init_process_group("gloo", timeout=group_timeout)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    try:
        with profiler if tool == "profiler" else contextlib.nullcontext():
            yield tools
        if tool == "profiler":
            write_allreduce_time(profiler, out / f"profile-rank-{rank}.json")
    finally:
        faulthandler.cancel_dump_traceback_later()
        if tool == "flight_recorder":  # NCCL's watchdog dumps on a timeout; gloo has none: dump here, always
            (out / f"fr-rank-{rank}").write_bytes(torch._C._distributed_c10d._dump_fr_trace(True, True, False))
    # torch 2.13: gloo's worker thread frees a finished barrier's Work after the rank's wait returns, and takes the
    # GIL to drop the tensors of the collectives before it; if the script's DDP model (whose Reducer holds the group:
    # destroy_process_group does not free gloo's) is freed first, on the main thread with the GIL, the group's
    # destructor waits for that thread for ever. Without this pause, 2 of 60 and 3 of 225 runs of a fixed script
    # ending in dist.barrier() hung at exit here; with it, none of 460: the GIL let go makes the race rare, not
    # impossible.
    time.sleep(0.05)
    dist.destroy_process_group()


def write_allreduce_time(profiler: torch.profiler.profile, path: Path) -> None:
    """The profiler's own summary, the row of gloo's all-reduce: its total time (ms) and its calls."""
    rows = [e for e in profiler.key_averages() if e.key == "gloo:all_reduce"]
    total_ms = sum(e.cpu_time_total for e in rows) / 1e3
    path.write_text(json.dumps({"allreduce_ms": total_ms, "calls": sum(e.count for e in rows)}))
