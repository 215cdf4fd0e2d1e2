"""The corpus files: train/val/pairs JSONL and vocab.json, generated from a fixed seed and
published atomically, so every machine writes the same bytes."""

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path

from minitrain.artifacts import write_atomic
from minitrain.corpus.generator import _pairs, _sentences, grammar_tokenizer
from minitrain.paths import DEFAULT_CORPUS_DIR

FILES = ("train.jsonl", "val.jsonl", "pairs.jsonl", "vocab.json")
SEED = 1337
N_TRAIN, N_VAL, N_PAIRS = 24_000, 2_000, 1_000



def _publish(path: Path, write: Callable[[Path], None]) -> str:
    """Write atomically (two ranks generating at once just replace identical bytes); the sha256."""
    write_atomic(path, write)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _jsonl(records: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def generate_corpus(out_dir: Path) -> dict[str, str]:
    """Write train/val/pairs JSONL and vocab.json into out_dir; return {filename: sha256}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    sentences = _sentences(rng, N_TRAIN + N_VAL, {})
    rng.shuffle(sentences)  # mix tenses and moods across the split
    train, val = sentences[:N_TRAIN], sentences[N_TRAIN:]
    pairs = _pairs(rng, N_PAIRS, dict.fromkeys(sentences))  # the probe tests unseen sentences
    contents = {
        "train.jsonl": _jsonl([{"text": s} for s in train]),
        "val.jsonl": _jsonl([{"text": s} for s in val]),
        "pairs.jsonl": _jsonl(pairs),
    }
    sums = {}
    for name, data in contents.items():
        sums[name] = _publish(out_dir / name, lambda path: path.write_bytes(data))
    sums["vocab.json"] = _publish(out_dir / "vocab.json", grammar_tokenizer().save)
    return sums


def ensure_corpus(out_dir: Path = DEFAULT_CORPUS_DIR) -> Path:
    """Generate the corpus into out_dir unless all its files are already there; return out_dir."""
    out_dir = Path(out_dir)
    if not all((out_dir / name).is_file() for name in FILES):
        generate_corpus(out_dir)
    return out_dir
