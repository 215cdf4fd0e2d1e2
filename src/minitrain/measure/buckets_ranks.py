"""What each rank runs in the bucket sweep (minitrain.measure.buckets starts it under torchrun).

For each cap, each rank builds the lab's model from its seed (35000 + rank, as train.py), wraps it with
DDP(bucket_cap_mb=cap) and the lab's instrumented comm hook, and trains on the same batches: blocks of
steps, the caps in order and then reversed, repeat after repeat, so that drift on the machine cancels.
It notes DDP's buckets (count, bytes, parameters), each step's time and its all-reduces (hook-only
timing), whether both ranks hold bitwise-equal weights after every block, and profiles a few steps per cap.
"""

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel.distributed import _DEFAULT_BUCKET_CAP_MB

from minitrain.ddp import barrier
from minitrain.measure.trace import profile_steps
from minitrain.rank import DDPRank, rebuilt_buckets
from minitrain.verify import compare_states

MiB = 1024 * 1024  # bucket_cap_mb counts MiB: DDP multiplies it by 1024 * 1024
TRACE_CAP = 0.1  # the cap whose traces are kept: several buckets, few enough to follow in Perfetto
PROGRESS = "buckets progress: "  # the line rank 0 prints after each block; the driver's bar counts them


@dataclass(frozen=True)
class Plan:
    """The caps (MiB; None: DDP's default) and how many steps each block and phase takes."""

    caps: tuple[float | None, ...] = (None, 25, 1, 0.5, 0.25, 0.1, 0.025, 0.01, 0.001)  # 1 to 18 buckets here
    warmup: int = 5  # DDP rebuilds its buckets at step 1; the rest settles the caches
    measured: int = 30  # timed steps per block
    repeats: int = 5  # blocks per cap, the caps' order alternating
    profiled: int = 4  # profiled steps per cap; each adds about 0.5 MB of trace (35 kB gzipped)

    @classmethod
    def quick(cls) -> "Plan":
        """2 caps (1 bucket and several), a few steps each: for tests and notebooks."""
        return cls(caps=(None, TRACE_CAP), warmup=2, measured=3, repeats=2, profiled=1)

    @property
    def blocks(self) -> int:
        """The progress bar's units: the timed blocks, then one profiled block per cap."""
        return self.repeats * len(self.caps) + len(self.caps)


def label(cap: float | None) -> str:
    """How a cap is shown: 'default' for None, else its MiB."""
    return "default" if cap is None else f"{cap:g}"


def ddp_caps(cap: float | None) -> tuple[int, int]:
    """(first bucket's cap, later buckets' cap) in bytes, as torch 2.13's DDP sets them: without
    bucket_cap_mb, 1 MiB then 25 MiB; with it, bucket_cap_mb MiB for every bucket, the first too."""
    if cap is None:
        return dist._DEFAULT_FIRST_BUCKET_BYTES, int(_DEFAULT_BUCKET_CAP_MB * MiB)
    return int(cap * MiB), int(cap * MiB)


# ------------------------------------------------------------------------------------------------
# One rank


def warmed_up(cap: float | None, plan: Plan, corpus_dir: Path, rank: int, world_size: int) -> DDPRank:
    """A fresh rank at one cap (every cap trains on the same batches), warmed up, the ranks lined up."""
    trainer = DDPRank(rank, world_size, corpus_dir, bucket_cap_mb=cap)
    trainer.steps(plan.warmup)
    barrier()  # each block starts with both ranks together
    return trainer


def seen_buckets(trainer: DDPRank, cap: float | None) -> dict:
    """The buckets as the comm hook saw them in the last step, and as DDP records them."""
    ddp, hook = trainer.ddp, trainer.hook
    ddp_sizes, ddp_order = rebuilt_buckets(ddp)  # DDP's own record of its (rebuilt) buckets
    first = dist._DEFAULT_FIRST_BUCKET_BYTES if ddp.bucket_bytes_cap_default else ddp.bucket_bytes_cap
    names = list(hook.names.values())
    return {"hook": [hook.buckets[i] for i in sorted(hook.buckets)],
            "ddp_sizes": ddp_sizes, "ddp_params_in_order": [names[i] for i in ddp_order],
            "first_cap_bytes": int(first), "cap_bytes": int(ddp.bucket_bytes_cap),
            "caps_as_stated": ddp_caps(cap) == (first, ddp.bucket_bytes_cap),
            "sizes": {name: p.numel() * p.element_size() for name, p in ddp.module.named_parameters()}}


def worker(plan: Plan, corpus_dir: Path, work: Path, rank: int, world_size: int) -> dict:
    """One rank: the timed blocks (caps alternating), the ranks' weights after each, then a profile per cap."""
    blocks, buckets, reference = [], {}, None
    for repeat in range(plan.repeats):
        for cap in plan.caps if repeat % 2 == 0 else plan.caps[::-1]:
            trainer = warmed_up(cap, plan, corpus_dir, rank, world_size)
            records = trainer.steps(plan.measured)
            block = {"repeat": repeat, "cap": label(cap), "step_ms": [r.step_ms for r in records],
                     "allreduce_ms": [r.allreduce_ms for r in records],
                     "after_last_ready_ms": [r.after_last_ready_ms for r in records]}
            seen = seen_buckets(trainer, cap)
            block["same_buckets"] = seen["hook"] == buckets.setdefault(label(cap), seen)["hook"]
            states = [None] * world_size
            dist.all_gather_object(states, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
            ranks = compare_states(states[0], states[1])
            reference = reference or states[0]  # every block trains the same steps on the same batches
            across = compare_states(reference, states[0])
            block |= {"ranks_equal": ranks.bitwise_equal, "ranks_max_diff": ranks.max_abs_diff,
                      "same_as_first_block": across.bitwise_equal, "first_block_max_diff": across.max_abs_diff}
            blocks.append(block)
            if rank == 0:
                print(f"{PROGRESS}{len(blocks)}/{plan.blocks} cap {label(cap)}: {len(buckets[label(cap)]['hook'])} "
                      f"bucket(s), median step {statistics.median(block['step_ms']):.1f} ms", flush=True)
    for cap in plan.caps:
        trainer = warmed_up(cap, plan, corpus_dir, rank, world_size)
        profile_steps(trainer.step, plan.profiled, work / f"trace-{label(cap)}-rank-{rank}.json.gz")
        if rank == 0:
            print(f"{PROGRESS}{len(blocks) + plan.caps.index(cap) + 1}/{plan.blocks} cap {label(cap)}: profiled",
                  flush=True)
    return {"rank": rank, "world_size": world_size, "threads": torch.get_num_threads(),
            "plan": asdict(plan), "blocks": blocks, "buckets": buckets}
