"""Scoring trained weights, as the controls and the compression runs do: validation loss and
minimal-pair accuracy of a saved state, every model on the same batches and pairs, one thread.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import patch

import torch

from minitrain.data import SEED_BASE, make_shard
from minitrain.probe import load_pairs, sentence_logprob
from minitrain.tokenizer import Tokenizer
from minitrain.train import TrainConfig, build_model_for_corpus, evaluate, seed_everything
from minitrain.verify import load_state

GLOBAL_BATCH = 2 * TrainConfig.batch_size  # sequences per step: 1 process x 32, or 2 processes x 16
VAL_BATCHES = 8  # 8 x 32 rows of 65 tokens: about all of val.jsonl (2,000 sentences) once
QUICK_PAIRS, QUICK_VAL_BATCHES = 100, 2  # the quick plans' scoring: seconds


@contextlib.contextmanager
def one_thread_per_process() -> Iterator[None]:
    """Run the block with 1 torch thread here and OMP_NUM_THREADS=1 in child processes, then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with patch.dict(os.environ, OMP_NUM_THREADS="1"):
            yield
    finally:
        torch.set_num_threads(threads)


def scoring_pairs(corpus_dir: Path, count: int | None) -> list[dict]:
    """The first `count` minimal pairs of the corpus (None: all of them)."""
    return load_pairs(Path(corpus_dir) / "pairs.jsonl")[:count]


def pair_outcomes(model: torch.nn.Module, tokenizer: Tokenizer, pairs: list[dict]) -> str:
    """Pair by pair, "1" where the grammatical sentence gets the higher log-probability, else "0"."""
    model.eval()
    return "".join("1" if sentence_logprob(model, tokenizer, p["good"]) > sentence_logprob(model, tokenizer, p["bad"])
                   else "0" for p in pairs)


def final_metrics(state_path: Path | None, corpus_dir: Path, pairs: list[dict], val_batches: int,
                  outcomes: bool = False) -> dict:
    """Validation loss and minimal-pair accuracy of a saved state (None: the initial weights);
    `outcomes`: also each pair's outcome (pair_outcomes), for a paired test between two models."""
    # seed 35000 = rank 0's seed in train.py: the initial weights both runs start from
    # (DDP broadcasts rank 0's weights to rank 1)
    seed_everything(SEED_BASE)
    model, tokenizer = build_model_for_corpus(corpus_dir, TrainConfig.block_size)
    if state_path is not None:
        model.load_state_dict(load_state(state_path))
    # a fresh val shard per model, so every model is scored on the same batches
    val = make_shard(0, 1, corpus_dir, split="val", batch_size=GLOBAL_BATCH, block_size=TrainConfig.block_size,
                     seed=SEED_BASE)
    won = pair_outcomes(model, tokenizer, pairs)
    metrics = {"val_loss": evaluate(model, val, val_batches), "accuracy": won.count("1") / len(pairs)}
    return metrics | {"pair_outcomes": won} if outcomes else metrics
