"""What `wrap_for_ddp` does to the weights: each rank saves its parameters before and after wrapping.

    torchrun --standalone --nproc-per-node=2 -m minitrain.lab.notebooks.wrapdemo --out DIR

Each rank seeds itself with 35000 + rank, so the two models start with *different* weights.
Wrapping in DistributedDataParallel broadcasts rank 0's parameters and buffers to every rank;
after it, both ranks hold rank 0's initial weights, bit for bit. `compare_wrap(DIR)` reads the
saved files and says so (notebooks/03-wrapping.ipynb shows it).
"""

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import SEED_BASE
from minitrain.ddp import barrier, cleanup, init_distributed, is_main_process, unwrap, wrap_for_ddp
from minitrain.model import count_parameters
from minitrain.train import build_model_for_corpus, seed_everything
from minitrain.verify import Comparison, compare_state_files

MODULE = "minitrain.lab.notebooks.wrapdemo"  # torchrun runs it with -m
BLOCK_SIZE = 64  # the experiment's block size, so the model is the one train.py trains


def state_path(out: Path, when: str, rank: int) -> Path:
    """`before-rank-0.pt`, `after-rank-1.pt`, ..."""
    return Path(out) / f"{when}-rank-{rank}.pt"


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the plain model's state dict (no `module.` prefix)."""
    return {k: v.detach().clone() for k, v in unwrap(model).state_dict().items()}


def run(out: Path, corpus_dir: Path) -> None:
    """One rank: seed, build, save, wrap, save, clean up."""
    rank, world_size = init_distributed("gloo")
    seed_everything(SEED_BASE + rank)
    if is_main_process():
        ensure_corpus(corpus_dir)
        out.mkdir(parents=True, exist_ok=True)
    barrier()
    model, _ = build_model_for_corpus(corpus_dir, BLOCK_SIZE)
    torch.save(snapshot(model), state_path(out, "before", rank))
    print(f"[rank {rank}] built MiniGPT ({count_parameters(model):,} parameters) with seed "
          f"{SEED_BASE + rank}; first weight {model.tok_emb.weight[0, 0].item():+.6f}", flush=True)
    model = wrap_for_ddp(model)  # DDP's constructor broadcasts rank 0's parameters here
    torch.save(snapshot(model), state_path(out, "after", rank))
    print(f"[rank {rank}] wrapped in DDP;        first weight "
          f"{unwrap(model).tok_emb.weight[0, 0].item():+.6f}", flush=True)
    cleanup()


@dataclass
class WrapResult:
    before: Comparison  # rank 0 against rank 1, before wrapping
    after: Comparison  # rank 0 against rank 1, after wrapping
    rank1_holds_rank0_init: Comparison  # rank 1 after wrapping against rank 0 before

    def summary(self) -> str:
        """The deterministic facts, one a line (no timings, no paths)."""
        return "\n".join([
            f"tensors in the state dict: {len(self.before.per_tensor)}",
            f"before wrapping: largest |rank 0 - rank 1| = {self.before.max_abs_diff:.4e}, "
            f"bitwise equal: {self.before.bitwise_equal}",
            f"after wrapping:  largest |rank 0 - rank 1| = {self.after.max_abs_diff:.4e}, "
            f"bitwise equal: {self.after.bitwise_equal}",
            f"rank 1 after wrapping == rank 0 before wrapping, bit for bit: "
            f"{self.rank1_holds_rank0_init.bitwise_equal}",
        ])


def compare_wrap(out: Path) -> WrapResult:
    """Compare the files a 2-rank wrapdemo run saved in `out`."""
    out = Path(out)
    before = compare_state_files(state_path(out, "before", 0), state_path(out, "before", 1))
    after = compare_state_files(state_path(out, "after", 0), state_path(out, "after", 1))
    inherited = compare_state_files(state_path(out, "before", 0), state_path(out, "after", 1))
    return WrapResult(before, after, inherited)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Save each rank's parameters before and after wrap_for_ddp.")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    args = p.parse_args(argv)
    run(args.out.resolve(), args.corpus_dir)


if __name__ == "__main__":
    main()
