"""What each level of notebook 15's DDP buys: its training step against torch's DDP, and its all-reduces.

    python -m minitrain.measure.scratch [--repeats N] [--nproc 2]

Every rank holds torch's DDP and the three scratch levels (and both at a small bucket cap), each on
its own MiniGPT (the lab's defaults) with its own AdamW, and steps them in turn, round after round
(interleaved medians: the same machine load for all). Rank 0 prints each one's median step, its ratio
to torch's DDP, its median finish() (the wait for what backward did not hide), the all-reduces of one
step, and the share of their time that overlapped backward in a profiler trace (measure.trace, as
notebook 10 reads it). A benchmark: it prints, it never fails on speed.
"""

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from minitrain.cli import LabArgumentParser, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import SEED_BASE, make_shard
from minitrain.ddp import cleanup, init_distributed
from minitrain.lab.scratch_graders import AllReduceRecorder
from minitrain.launch import spawn_workers
from minitrain.measure.bench import interleaved_medians
from minitrain.measure.trace import load_trace, overlap_table, overlapped_share, profile_steps
from minitrain.rank import rebuilt_buckets
from minitrain.scratch_ddp import BucketedDDP, NaiveDDP, OverlappedDDP
from minitrain.train import TrainConfig, build_model_for_corpus, seed_everything

WARMUP = 5  # rounds left out: allocations, AdamW's state, DDP's bucket rebuild at step 1
PROFILED = 3  # steps of each level profiled after the timed rounds, for the overlap share
SMALL_CAP_MB = 0.25  # several buckets: what overlap can do with MiniGPT's 1.1 MB of gradients
LEVELS: dict[str, Callable[[nn.Module], nn.Module]] = {  # torch's DDP (no Python comm hook), then the levels
    "torch DDP": DistributedDataParallel, "NaiveDDP": NaiveDDP, "OverlappedDDP": OverlappedDDP,
    "BucketedDDP": BucketedDDP,
    f"torch DDP, {SMALL_CAP_MB:g} MiB": partial(DistributedDataParallel, bucket_cap_mb=SMALL_CAP_MB),
    f"BucketedDDP, {SMALL_CAP_MB:g} MiB": partial(BucketedDDP, bucket_cap_mb=SMALL_CAP_MB),
}


class _Level:
    """One rank's MiniGPT as train.py builds it (seed 35000 + rank, its shard, AdamW), wrapped; the seconds of
    each step's finish() (0 for torch's DDP, which waits inside backward)."""

    def __init__(self, rank: int, world_size: int, corpus_dir: Path, wrap: Callable[[nn.Module], nn.Module]) -> None:
        config = TrainConfig()
        seed_everything(SEED_BASE + rank)
        model, _ = build_model_for_corpus(corpus_dir, config.block_size)
        self.shard = make_shard(rank, world_size, corpus_dir, batch_size=config.batch_size,
                                block_size=config.block_size, seed=SEED_BASE + rank)
        self.wrapped = wrap(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        self.finish_s: list[float] = []

    def train_step(self) -> None:
        loss = self.wrapped(next(self.shard)).loss
        loss.backward()
        start = time.perf_counter()
        getattr(self.wrapped, "finish", lambda: None)()
        self.finish_s.append(time.perf_counter() - start)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _numels(level: _Level) -> list[int]:
    """The sizes (float32 elements) of one step's all-reduces: DDP's rebuilt buckets, or the level's calls."""
    if isinstance(level.wrapped, DistributedDataParallel):
        return [nbytes // 4 for nbytes in rebuilt_buckets(level.wrapped)[0]]
    recorder = AllReduceRecorder()
    try:
        level.train_step()
    finally:
        recorder.close()
    return [call["numel"] for call in recorder.calls]


def _overlap_share(level: _Level, path: Path) -> float:
    """The share of the all-reduces' time that ran while backward computed, in a profiler trace of PROFILED steps."""
    profile_steps(level.train_step, PROFILED, path)
    return overlapped_share(overlap_table(load_trace(path)))


def _worker(repeats: int, corpus_dir: str, out: str) -> None:
    rank, world_size = init_distributed("gloo")
    levels = {name: _Level(rank, world_size, Path(corpus_dir), wrap) for name, wrap in LEVELS.items()}
    interleaved_medians({name: level.train_step for name, level in levels.items()}, WARMUP)
    for level in levels.values():
        level.finish_s.clear()
    medians = interleaved_medians({name: level.train_step for name, level in levels.items()}, repeats)
    finish = {name: statistics.median(level.finish_s) for name, level in levels.items()}
    numels = {name: _numels(level) for name, level in levels.items()}
    overlap = {name: _overlap_share(level, Path(out).with_name(f"trace-{rank}-{i}.json.gz"))
               for i, (name, level) in enumerate(levels.items())}
    if rank == 0:
        Path(out).write_text(json.dumps({"medians_s": medians, "finish_s": finish, "numels": numels,
                                         "overlap": overlap, "world_size": world_size}))
    cleanup()


def table(result: dict) -> str:
    """One row per level: median step (ms), ratio to torch's DDP, median finish() (ms), the all-reduces and the
    share of their time that overlapped backward."""
    base = result["medians_s"]["torch DDP"]
    rows = ["| level | median step (ms) | / torch DDP | median finish() (ms) | all-reduces per step | "
            "sizes (float32 elements) | overlap share |", "|---|---|---|---|---|---|---|"]
    for name, seconds in result["medians_s"].items():
        numels = result["numels"][name]
        shown = (", ".join(map(str, numels)) if len(numels) <= 6
                 else f"{min(numels)} to {max(numels)}, {sum(numels)} in all")
        rows.append(f"| {name} | {seconds * 1e3:.1f} | {seconds / base:.2f} | {result['finish_s'][name] * 1e3:.1f} | "
                    f"{len(numels)} | {shown} | {result['overlap'][name]:.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = LabArgumentParser(description="Notebook 15's DDP levels against torch's DDP: step time and all-reduces.")
    p.add_argument("--repeats", type=positive_int, default=30, help="rounds measured after the warm-up (default 30)")
    p.add_argument("--nproc", type=positive_int, default=2, help="ranks (default 2)")
    args = p.parse_args(argv)
    ensure_corpus(DEFAULT_CORPUS_DIR)
    with tempfile.TemporaryDirectory(prefix="minitrain-scratch-") as tmp:
        out = Path(tmp) / "result.json"
        spawn_workers(_worker, args.nproc, args.repeats, str(DEFAULT_CORPUS_DIR), str(out))
        result = json.loads(out.read_text())
    print(f"{result['world_size']} ranks, medians over {args.repeats} interleaved rounds after {WARMUP} warm-up "
          "rounds:")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
