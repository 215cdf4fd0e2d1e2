"""What each level of notebook 15's DDP buys: its training step against torch's DDP, and its all-reduces.

    python -m minitrain.measure.scratch [--repeats N] [--nproc 2]

Every rank holds torch's DDP and the three scratch levels, each on its own MiniGPT (the lab's
defaults) with its own AdamW, and steps them in turn, round after round (interleaved medians: the
same machine load for all). Rank 0 prints each level's median step, its ratio to torch's DDP, and
the all-reduces of one step (count and sizes). A benchmark: it prints, it never fails on speed.
"""

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from minitrain.cli import LabArgumentParser, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.ddp import cleanup, init_distributed
from minitrain.lab.scratch_graders import AllReduceRecorder
from minitrain.launch import spawn_workers
from minitrain.measure.bench import interleaved_medians
from minitrain.data import SEED_BASE, make_shard
from minitrain.rank import rebuilt_buckets
from minitrain.scratch_ddp import BucketedDDP, NaiveDDP, OverlappedDDP
from minitrain.train import TrainConfig, build_model_for_corpus, seed_everything

WARMUP = 5  # rounds left out: allocations, AdamW's state, DDP's bucket rebuild at step 1
LEVELS = {"torch DDP": None, "NaiveDDP": NaiveDDP, "OverlappedDDP": OverlappedDDP, "BucketedDDP": BucketedDDP}


class _Level:
    """One rank's MiniGPT as train.py builds it (seed 35000 + rank, its shard, AdamW), wrapped in torch's DDP
    (no Python comm hook) or a scratch level."""

    def __init__(self, rank: int, world_size: int, corpus_dir: Path, wrapper: type | None) -> None:
        config = TrainConfig()
        seed_everything(SEED_BASE + rank)
        model, _ = build_model_for_corpus(corpus_dir, config.block_size)
        self.shard = make_shard(rank, world_size, corpus_dir, batch_size=config.batch_size,
                                block_size=config.block_size, seed=SEED_BASE + rank)
        self.wrapped = DistributedDataParallel(model) if wrapper is None else wrapper(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)

    def train_step(self) -> None:
        loss = self.wrapped(next(self.shard)).loss
        loss.backward()
        getattr(self.wrapped, "finish", lambda: None)()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _worker(repeats: int, corpus_dir: str, out: str) -> None:
    rank, world_size = init_distributed("gloo")
    levels = {name: _Level(rank, world_size, Path(corpus_dir), wrapper) for name, wrapper in LEVELS.items()}
    interleaved_medians({name: level.train_step for name, level in levels.items()}, WARMUP)
    medians = interleaved_medians({name: level.train_step for name, level in levels.items()}, repeats)
    sizes = {"torch DDP": [n // 4 for n in rebuilt_buckets(levels["torch DDP"].wrapped)[0]]}  # bytes of float32
    for name in list(LEVELS)[1:]:
        recorder = AllReduceRecorder()
        try:
            levels[name].train_step()
        finally:
            recorder.close()
        sizes[name] = [call["numel"] for call in recorder.calls]
    if rank == 0:
        Path(out).write_text(json.dumps({"medians_s": medians, "numels": sizes, "world_size": world_size}))
    cleanup()


def table(result: dict) -> str:
    """One row per level: median step (ms), ratio to torch's DDP, all-reduces per step and their sizes."""
    base = result["medians_s"]["torch DDP"]
    rows = ["| level | median step (ms) | / torch DDP | all-reduces per step | sizes (float32 elements) |",
            "|---|---|---|---|---|"]
    for name, seconds in result["medians_s"].items():
        numels = result["numels"][name]
        shown = ", ".join(map(str, numels)) if len(numels) <= 4 else \
            f"{min(numels)} to {max(numels)}, {sum(numels)} in all"
        rows.append(f"| {name} | {seconds * 1e3:.1f} | {seconds / base:.2f} | {len(numels)} | {shown} |")
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
