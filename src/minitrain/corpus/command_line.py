"""A deterministic English verb-grammar corpus: a tiny language that a tiny GPT can learn.
Its command line, `python -m minitrain.corpus --out DIR`: write the files, print their sums."""

import argparse
import time
from pathlib import Path

from minitrain.corpus.files import generate_corpus
from minitrain.paths import DEFAULT_CORPUS_DIR
from minitrain.tokenizer import Tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_CORPUS_DIR, help="output folder")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    sums = generate_corpus(args.out)
    seconds = time.perf_counter() - start
    for name, digest in sums.items():
        path = args.out / name
        if name == "vocab.json":
            count = f"{Tokenizer.load(path).vocab_size} tokens"
        else:
            count = f"{len(path.read_bytes().splitlines())} lines"
        print(f"{name:12s} {count:>12s}  sha256 {digest}")
    print(f"wrote {args.out} in {seconds:.2f} s")
