"""The single-process training loop: seed, build, train with AdamW, evaluate, probe grammar.

Run it: `python -m minitrain.train --steps 300`.
"""

import argparse
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import SEED_BASE, Shard, make_shard
from minitrain.model import MiniGPT, build_minigpt, count_parameters
from minitrain.probe import load_pairs, minimal_pair_accuracy
from minitrain.tokenizer import Tokenizer


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 16
    block_size: int = 64
    lr: float = 3e-4  # the lab sheet's AdamW learning rate
    eval_every: int = 50
    eval_batches: int = 8
    seed: int = SEED_BASE
    corpus_dir: Path = DEFAULT_CORPUS_DIR


def seed_everything(seed: int) -> None:
    """Seed Python's and torch's RNGs, so model init and data order repeat exactly."""
    random.seed(seed)
    torch.manual_seed(seed)


def log_step(step: int, loss: float, seconds: float, **extra: float) -> str:
    """Print one training-log line (step, loss, time in ms, any extra figures) and return it."""
    parts = [f"step {step:4d}", f"loss {loss:.4f}", f"{seconds * 1e3:7.1f} ms"]
    parts += [f"{k} {v:.2f}" for k, v in extra.items()]
    line = " | ".join(parts)
    print(line, flush=True)
    return line


def build_model_for_corpus(corpus_dir: Path, block_size: int,
                           **config: int | float) -> tuple[MiniGPT, Tokenizer]:
    """A MiniGPT sized to the corpus's vocabulary, and its tokenizer. `config`: MiniGPTConfig's other fields as
    keywords, e.g. n_layer=2, n_head=4, n_embd=96 (its defaults), dropout=0.0; built from torch's RNG as seeded."""
    if Path(corpus_dir) == DEFAULT_CORPUS_DIR:
        ensure_corpus(corpus_dir)  # generated on first use (atomically: two ranks at once are harmless)
    tokenizer = Tokenizer.load(Path(corpus_dir) / "vocab.json")
    model = build_minigpt(tokenizer.vocab_size, block_size=block_size, **config)
    return model, tokenizer


@torch.no_grad()
def evaluate(model: torch.nn.Module, shard: Shard, batches: int) -> float:
    """Mean loss over the next `batches` batches of a shard, without gradients."""
    was_training = model.training
    model.eval()
    loss = sum(model(next(shard)).loss.item() for _ in range(batches)) / batches
    model.train(was_training)
    return loss


def train(config: TrainConfig) -> dict:
    """Train one process; return the loss history and grammar accuracy before and after."""
    ensure_corpus(config.corpus_dir)
    seed_everything(config.seed)
    model, tokenizer = build_model_for_corpus(config.corpus_dir, config.block_size)
    shard = make_shard(0, 1, config.corpus_dir, batch_size=config.batch_size,
                       block_size=config.block_size, seed=config.seed)
    val = make_shard(0, 1, config.corpus_dir, split="val", batch_size=config.batch_size,
                     block_size=config.block_size, seed=config.seed)
    pairs = load_pairs(Path(config.corpus_dir) / "pairs.jsonl")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    print(f"MiniGPT: {count_parameters(model):,} parameters, vocabulary {tokenizer.vocab_size}")
    accuracy_before = minimal_pair_accuracy(model, tokenizer, pairs)

    losses, val_losses = [], []
    for step in range(config.steps):
        t0 = time.perf_counter()
        loss = model(next(shard)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % config.eval_every == 0 or step == config.steps - 1:
            val_losses.append((step, evaluate(model, val, config.eval_batches)))
            log_step(step, losses[-1], time.perf_counter() - t0, val_loss=val_losses[-1][1])

    accuracy_after = minimal_pair_accuracy(model, tokenizer, pairs)
    print(f"minimal-pair accuracy: {accuracy_before:.3f} before training, "
          f"{accuracy_after:.3f} after {config.steps} steps ({len(pairs)} pairs)")
    return {"losses": losses, "val_losses": val_losses, "model": model,
            "accuracy_before": accuracy_before, "accuracy_after": accuracy_after}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train MiniGPT in one process.")
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--block-size", type=int, default=TrainConfig.block_size)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    args = parser.parse_args(argv)
    train(TrainConfig(steps=args.steps, batch_size=args.batch_size, block_size=args.block_size,
                      lr=args.lr, corpus_dir=args.corpus_dir))


if __name__ == "__main__":
    main()
