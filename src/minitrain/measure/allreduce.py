"""The all-reduce as the measurements model and time it: the ring's share of a message, the
alpha-beta fit's prediction (an input: a benchmark's results file), and a checked stopwatch.
"""

import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.lab.reporting.results_file import read_results_file
from minitrain.paths import relative

NO_BENCHMARK = ("no benchmark given: pass --bench with an allreduce_bench.json "
                "(python -m minitrain.measure.allreduce_bench makes one)")


def pattern(numel: int, rank: int) -> torch.Tensor:
    """What `rank` contributes: small integers, so float32 sums are exact and checkable."""
    return (torch.arange(numel) % 251 + rank).float()


def expected_sum(numel: int, world_size: int) -> torch.Tensor:
    """The all-reduced (summed) pattern: world_size copies of the base plus 0 + 1 + ... + (n-1)."""
    return (world_size * (torch.arange(numel) % 251) + world_size * (world_size - 1) // 2).float()


def ring_factor(world_size: int) -> float:
    """2(n-1)/n: the share of a message each rank sends (and receives) in a ring all-reduce."""
    return 2 * (world_size - 1) / world_size


def predict_allreduce_ms(nbytes: int, fit: dict[str, float]) -> float:
    """All-reduce time the alpha-beta fit predicts for a message of `nbytes` (e.g. all gradients)."""
    return fit["alpha_ms"] + nbytes * fit["beta_ns_per_byte"] * 1e-6


def benchmark_fit(bench: Path | None) -> tuple[dict | None, dict]:
    """The alpha-beta fit of a benchmark's results file (None: no file given), and what a
    measurement's results record of it."""
    if bench is None:
        return None, {"file": None, "note": NO_BENCHMARK}
    results = read_results_file(bench, "allreduce_bench")
    return results["fit"], {"file": relative(bench), "fit": results["fit"], "date": results["provenance"].date}


def bench_option(p) -> None:
    """The --bench option of a measurement that predicts its all-reduces from a benchmark's fit."""
    p.add_argument("--bench", type=Path, default=None,
                   help="an allreduce_bench.json whose alpha-beta fit predicts the all-reduce times (default: none)")


def time_allreduce(nbytes: int, warmup: int, iters: int, rank: int, world_size: int) -> list[float]:
    """Seconds per timed iteration (max over ranks); raises if any sum is wrong."""
    numel = nbytes // 4
    mine, expected = pattern(numel, rank), expected_sum(numel, world_size)
    buffer = torch.empty(numel)
    times = torch.zeros(iters, dtype=torch.float64)
    for i in range(warmup + iters):
        buffer.copy_(mine)  # all_reduce works in place: start every iteration from the inputs
        dist.barrier()  # both ranks start together, so neither times the other's lateness
        start = time.perf_counter()
        dist.all_reduce(buffer)
        elapsed = time.perf_counter() - start
        if not torch.equal(buffer, expected):
            raise RuntimeError(f"rank {rank}: wrong all-reduce result for {nbytes} bytes")
        if i >= warmup:
            times[i - warmup] = elapsed
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return times.tolist()


def timed_ms(call: Callable[[], object]) -> float:
    """Milliseconds `call()` took on this rank, every rank starting together (a barrier first); a collective."""
    dist.monitored_barrier()
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3
