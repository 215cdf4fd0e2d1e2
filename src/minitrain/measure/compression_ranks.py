"""The compression measurement's variants and what each rank runs with them (minitrain.measure.compression
starts it under torchrun): the plan, the variants' comm hooks and the bytes each sends in theory, gloo's
half-precision check, and the training runs.
"""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from minitrain.data import SEED_BASE
from minitrain.ddp import barrier
from minitrain.measure.allreduce import ring_factor
from minitrain.measure.scoring import QUICK_PAIRS, QUICK_VAL_BATCHES, VAL_BATCHES
from minitrain.measure.sockets import gloo_pair_endpoints, my_connections, pair_bytes
from minitrain.rank import DDPRank

MIN_COMPRESSION_RATE = 2  # PowerSGDState's default: compress a matrix only if it shrinks more than 2x
CONTROL_SEED_STEP = 1000  # the seed controls' seed bases: SEED_BASE + 1000 k
RUN_MARK = "compression: finished"  # rank 0's line after each run; the driver's progress bar counts them
VARIANTS = {  # name -> what it sends, for tables and figures
    "plain": "DDP's all-reduce (allreduce_hook), float32",
    "fp16": "fp16_compress_hook: float16 on the wire",
    "bf16": "bf16_compress_hook: bfloat16 on the wire",
    "powersgd-1": "powerSGD_hook, approximation rank 1",
    "powersgd-2": "powerSGD_hook, approximation rank 2",
    "powersgd-4": "powerSGD_hook, approximation rank 4",
}


@dataclass(frozen=True)
class Plan:
    """How long each run trains, which variants run, the scoring."""

    steps: int = 300
    warmup: int = 30  # PowerSGD's start_powerSGD_iter: plain all-reduce before it (its docs: about 10% of training)
    variants: tuple[str, ...] = tuple(VARIANTS)
    seed_controls: int = 3  # more plain runs with other seeds: the learning yardstick
    check_elements: int = 24_063_328  # #152300's reproducer: 24,063,328 float16 values per rank
    pairs: int | None = None  # minimal pairs scored (None: all)
    val_batches: int = VAL_BATCHES

    @classmethod
    def quick(cls) -> "Plan":
        """A few steps of plain, fp16 and powersgd-1: seconds, for tests."""
        return cls(steps=6, warmup=2, variants=("plain", "fp16", "powersgd-1"), seed_controls=1,
                   check_elements=1 << 20, pairs=QUICK_PAIRS, val_batches=QUICK_VAL_BATCHES)


def powersgd_rank(variant: str) -> int | None:
    """The matrix approximation rank of a PowerSGD variant ("powersgd-2" -> 2), else None."""
    return int(variant.split("-")[1]) if variant.startswith("powersgd-") else None


def make_comm_hook(variant: str, warmup: int) -> tuple[Callable, powerSGD_hook.PowerSGDState | None]:
    """The variant's DDP comm hook and its state (None: the default process group)."""
    if variant == "plain":
        return default_hooks.allreduce_hook, None
    if variant in ("fp16", "bf16"):
        return getattr(default_hooks, f"{variant}_compress_hook"), None
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank(variant),
                                        start_powerSGD_iter=warmup, min_compression_rate=MIN_COMPRESSION_RATE,
                                        use_error_feedback=True, warm_start=True)
    return powerSGD_hook.powerSGD_hook, state


def powersgd_matrices(shapes: dict[str, list[int]], rank: int, min_rate: float = MIN_COMPRESSION_RATE) -> list[dict]:
    """What powerSGD_hook does with each gradient: viewed as n x (the rest), with rank min(n, m, r),
    compressed into P (n x r) and Q (m x r) only if (n + m) r x min_rate < n m; else sent as is."""
    rows = []
    for name, shape in shapes.items():
        n, m = shape[0], math.prod(shape[1:])  # a vector is n x 1: never worth compressing
        r = min(n, m, rank)
        compressed = (n + m) * r * min_rate < n * m
        rows.append({"name": name, "n": n, "m": m, "rank": r, "compressed": compressed,
                     "p": n * r if compressed else 0, "q": m * r if compressed else 0,
                     "uncompressed": 0 if compressed else n * m})
    return rows


def theory(variant: str, shapes: dict[str, list[int]], world_size: int) -> dict:
    """Bytes each rank sends per step in gloo's ring, 2(N-1)/N x what is all-reduced (N ranks), and
    how many all-reduces a bucket takes."""
    values = sum(math.prod(s) for s in shapes.values())
    ring = ring_factor(world_size)
    if variant == "plain":
        return {"bytes": ring * 4 * values, "allreduces_per_bucket": 1,
                "formula": "2(N-1)/N x 4 bytes x every gradient value (N ranks)"}
    if variant in ("fp16", "bf16"):
        return {"bytes": ring * 2 * values, "allreduces_per_bucket": 1,
                "formula": "2(N-1)/N x 2 bytes x every gradient value (N ranks): half of plain"}
    rows = powersgd_matrices(shapes, powersgd_rank(variant))
    u, p, q = (sum(r[k] for r in rows) for k in ("uncompressed", "p", "q"))
    return {"bytes": ring * 4 * (u + p + q), "allreduces_per_bucket": 3, "uncompressed": u, "p": p, "q": q,
            "compressed_matrices": sum(r["compressed"] for r in rows),
            "formula": "2(N-1)/N x 4 bytes x (uncompressed values + P + Q), N ranks: three all-reduces per "
                       "bucket, the uncompressed tensors, then P, then Q"}


# ------------------------------------------------------------------------------------------------
# One rank


def reproducer(rank: int, elements: int) -> torch.Tensor:
    """#152300's input on `rank`: float16 uniform over the whole float16 range, numpy seed 1024 + rank."""
    return torch.from_numpy(np.random.RandomState(1024 + rank).uniform(-65504, 65504, elements).astype(np.float16))


def half_allreduce_check(elements: int, rank: int, world_size: int) -> dict:
    """All-reduce #152300's input in float16 and in bfloat16 with gloo and count the elements that
    differ from the exact sum rounded once (float64, then the dtype). A collective."""
    inputs = [reproducer(r, elements) for r in range(world_size)]  # every rank makes every rank's input
    counts = {}
    for dtype in (torch.float16, torch.bfloat16):
        mine = inputs[rank].to(dtype, copy=True)  # all_reduce works in place; the inputs stay as made
        expected = torch.empty_like(mine)
        for start in range(0, elements, 1 << 20):  # chunks: float64 copies of 24M values would be 200 MB each
            part = slice(start, start + (1 << 20))
            expected[part] = sum(x[part].to(dtype).double() for x in inputs).to(dtype)
        dist.all_reduce(mine)
        counts[str(dtype).removeprefix("torch.")] = {"mismatches": int((mine != expected).sum()),
                                                     "overflowed_to_inf": int(torch.isinf(expected).sum())}
    return {"elements": elements, "dtypes": counts}


def powersgd_counts(state: object, compressed_steps: int) -> dict | None:
    """What PowerSGD itself counted: elements before and after compression per step, P and Q sizes."""
    if not isinstance(state, powerSGD_hook.PowerSGDState) or not compressed_steps:
        return None
    return {"numel_before_per_step": state.total_numel_before_compression / compressed_steps,
            "numel_after_per_step": state.total_numel_after_compression / compressed_steps,
            "p_numel": sum(p.numel() for p in state.p_memory_dict.values()),
            "q_numel": sum(q.numel() for q in state.q_memory_dict.values())}


def train_run(variant: str, seed: int, plan: Plan, corpus_dir: Path, work: Path, rank: int, world_size: int,
              endpoints: list[str]) -> tuple[dict, dict[str, list[int]]]:
    """Train one variant from `seed` for plan.steps steps; socket bytes before, at the end of the
    warm-up and after; each rank's final weights saved into the work folder. Also the parameters' shapes."""
    comm_hook, state = make_comm_hook(variant, plan.warmup)
    trainer = DDPRank(rank, world_size, corpus_dir, seed_base=seed, comm_hook=comm_hook, comm_state=state)
    barrier()
    marks, records = [pair_bytes(endpoints)], []
    for step in range(plan.steps):
        if step == plan.warmup:
            marks.append(pair_bytes(endpoints))
        records.append(trainer.step())
    marks.append(pair_bytes(endpoints))  # this rank's all-reduces of those steps have all completed
    state_file = f"{variant}-seed{seed}-rank{rank}.pt"
    torch.save(trainer.model.state_dict(), work / state_file)
    run = {"variant": variant, "seed": seed, "bytes": marks, "loss": [r.loss for r in records],
           "state_file": state_file, "powersgd": powersgd_counts(state, plan.steps - plan.warmup)}
    return run, {name: list(p.shape) for name, p in trainer.model.named_parameters()}


def worker(plan: Plan, corpus_dir: Path, work: Path, rank: int, world_size: int) -> dict:
    """One rank: the fp16 check, every variant's run, the seed controls."""
    check = half_allreduce_check(plan.check_elements, rank, world_size)
    endpoints = gloo_pair_endpoints(my_connections())
    runs = []
    jobs = [(v, SEED_BASE) for v in plan.variants] + [
        ("plain", SEED_BASE + CONTROL_SEED_STEP * k) for k in range(1, plan.seed_controls + 1)]
    for variant, seed in jobs:
        run, shapes = train_run(variant, seed, plan, corpus_dir, work, rank, world_size, endpoints)
        runs.append(run)
        if rank == 0:
            print(f"{RUN_MARK} {variant}, seed {seed}", flush=True)
    return {"rank": rank, "world_size": world_size, "threads": torch.get_num_threads(), "plan": asdict(plan),
            "shapes": shapes, "half_check": check, "pair_endpoints": endpoints, "runs": runs}
