"""Grammar probe: does the model prefer the grammatical sentence of each minimal pair?"""

import json
from pathlib import Path

import torch

from minitrain.tokenizer import Tokenizer


def load_pairs(path: str | Path) -> list[dict]:
    """Read `pairs.jsonl`: one {"good", "bad", "error"} object a line."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@torch.no_grad()
def sentence_logprob(model: torch.nn.Module, tokenizer: Tokenizer, sentence: str) -> float:
    """Total log-probability of a sentence, starting after <eos> and ending with <eos>."""
    ids = [tokenizer.eos_id] + tokenizer.encode(sentence) + [tokenizer.eos_id]
    seq = torch.tensor(ids).unsqueeze(0)
    logits = model((seq[:, :-1], None)).logits
    logp = torch.log_softmax(logits, dim=-1).gather(2, seq[:, 1:].unsqueeze(-1))
    return logp.sum().item()


def minimal_pair_accuracy(model: torch.nn.Module, tokenizer: Tokenizer, pairs: list[dict]) -> float:
    """Fraction of pairs where the grammatical sentence gets the higher log-probability."""
    was_training = model.training
    model.eval()
    wins = sum(sentence_logprob(model, tokenizer, p["good"]) > sentence_logprob(model, tokenizer, p["bad"])
               for p in pairs)
    model.train(was_training)
    return wins / len(pairs)
