"""Load the corpus, give each rank its shard, and pack sentences into training batches."""

import json
import os
import random
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.tokenizer import Tokenizer

SEED_BASE = 35000  # the lab's global seed base; rank r uses SEED_BASE + r

Batch = tuple[torch.Tensor, torch.Tensor]


class CorpusError(ValueError):
    """A corpus file is missing, empty or malformed; the message names the file, line and fix."""


def load_corpus(path: str | Path) -> list[str]:
    """Read a `{"text": ...}`-per-line JSONL file into a list of sentences, checking every line."""
    path = Path(path)
    fix = f"regenerate it with `python -m minitrain.corpus --out {path.parent}`"
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist; {fix}")
    sentences = []
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        where = f"{path}:{lineno}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise CorpusError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start}); {fix}") from e
        except json.JSONDecodeError as e:
            raise CorpusError(f"{where}: not a JSON object ({e.msg}); {fix}") from e
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise CorpusError(f'{where}: expected {{"text": "<sentence>"}}, got {raw[:60]!r}; {fix}')
        if not record["text"].strip():
            raise CorpusError(f"{where}: empty sentence; {fix}")
        sentences.append(record["text"])
    if not sentences:
        raise CorpusError(f"corpus file {path} holds no sentences; {fix}")
    return sentences


class Shard:
    """One rank's sentences (index % world_size == rank) and an endless stream of batches.

    Each epoch shuffles the shard with a seeded RNG, joins the sentences with <eos> and cuts the
    token stream into rows of block_size + 1; a row gives inputs row[:-1] and targets row[1:].
    """

    def __init__(self, sentences: list[str], tokenizer: Tokenizer, batch_size: int,
                 block_size: int, seed: int):
        self.sentences = sentences
        self.num_sentences = len(sentences)
        self.batch_size, self.block_size = batch_size, block_size
        self._encoded = [tokenizer.encode(s) + [tokenizer.eos_id] for s in sentences]
        self.seed = seed
        self._start()
        self.first_sentence = sentences[self._next_order[0]]  # the first sentence this rank trains on

    def _start(self) -> None:
        """The stream's beginning: the seeded RNG, an empty buffer, no batch drawn yet."""
        self._rng = random.Random(self.seed)
        self._buffer: list[int] = []
        self._next_order: list[int] | None = self._shuffled()  # drawn now, to name its first sentence
        self.batches = 0  # drawn so far: the stream's position

    def _shuffled(self) -> list[int]:
        order = list(range(self.num_sentences))
        self._rng.shuffle(order)
        return order

    def _refill(self) -> None:
        order, self._next_order = self._next_order or self._shuffled(), None
        for i in order:
            self._buffer.extend(self._encoded[i])

    def __iter__(self) -> "Shard":
        return self

    def __next__(self) -> Batch:
        need = self.batch_size * (self.block_size + 1)
        while len(self._buffer) < need:
            self._refill()
        chunk, self._buffer = self._buffer[:need], self._buffer[need:]
        self.batches += 1
        rows = torch.tensor(chunk, dtype=torch.long).view(self.batch_size, self.block_size + 1)
        return rows[:, :-1], rows[:, 1:]

    def state_dict(self) -> dict[str, int]:
        """The stream's position: its seed and the batches drawn (the order is a function of both)."""
        return {"seed": self.seed, "batches": self.batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue where `state` was taken: restart from the seed and skip its batches, drawing the
        same shuffles as the stream did (one per epoch, when its tokens run out) without building them."""
        if state["seed"] != self.seed:
            raise ValueError(f"the saved stream position was taken with seed {state['seed']}, this shard has "
                             f"seed {self.seed}: resume with the same ranks and seeds")
        self._start()
        skip = state["batches"] * self.batch_size * (self.block_size + 1)
        while len(self._buffer) < skip:  # __next__ refills exactly when fewer tokens remain than it needs
            skip -= len(self._buffer)
            self._buffer = []
            self._refill()
        self._buffer = self._buffer[skip:]
        self.batches = state["batches"]


def make_shard(rank: int, world_size: int, corpus_dir: str | Path = DEFAULT_CORPUS_DIR, *,
               split: str = "train", batch_size: int = 16, block_size: int = 64,
               seed: int | None = None) -> Shard:
    """The shard of rank `rank` among `world_size`: the sentences whose index in the corpus satisfies
    index % world_size == rank, in corpus order, whatever `world_size` is (the grader tries 1 to 4 ranks). Split
    by the `rank` and `world_size` given: the grader calls it for each rank in turn in one plain process (no
    process group, no LOCAL_RANK), and no DistributedSampler (it shuffles, and pads or drops sentences). Name the
    list of this rank's sentences `mine`: the lines after your region read it."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}] for world_size {world_size}, "
                         f"got {rank!r}")
    corpus_dir = Path(corpus_dir)
    if corpus_dir == DEFAULT_CORPUS_DIR:
        ensure_corpus(corpus_dir)  # the default corpus is generated on first use
    sentences = load_corpus(corpus_dir / f"{split}.jsonl")
    ### BEGIN SOLUTION: Block B: make_shard's split
    mine = sentences[rank::world_size]  # the same as index % world_size == rank
    ### END SOLUTION
    if not mine:
        raise CorpusError(f"rank {rank} gets an empty shard: {corpus_dir / f'{split}.jsonl'} has "
                         f"{len(sentences)} sentences for {world_size} ranks; use at most "
                         f"{len(sentences)} processes")
    tokenizer = Tokenizer.load(corpus_dir / "vocab.json")
    return Shard(mine, tokenizer, batch_size, block_size, SEED_BASE + rank if seed is None else seed)


def check_shards(shard: Shard, rank: int, world_size: int, corpus_total: int) -> dict[str, list]:
    """Every rank prints one line that starts `[rank R] pid PID` (R its rank, PID os.getpid(): the lab's fault tests
    and notebook 13 find a rank's process there) and holds its shard's size (`shard.num_sentences`) and first
    sentence (`shard.first_sentence`), then gathers every rank's pair (a collective: all ranks call it) and checks that the sizes add up to
    `corpus_total` and that no two first sentences are equal: otherwise RuntimeError, on every rank (raised: not an
    assert, which python -O skips, nor another error type).
    Returns {"shard_sentences": [size of rank 0, rank 1, ...], "first_sentences": [first of rank 0, ...]}.
    The sheet's sanity check: it catches sizes that do not add up to the corpus and two ranks starting on the same
    sentence, but passes two identical shards (each rank's own seed makes their first sentences differ): notebook 02."""
    ### BEGIN SOLUTION: Block B: the counts check and the first-sentence log
    print(f"[rank {rank}] pid {os.getpid()}, shard: {shard.num_sentences} sentences, "
          f"first it trains on: {shard.first_sentence!r}", flush=True)
    reports = [None] * world_size
    dist.all_gather_object(reports, (shard.num_sentences, shard.first_sentence))
    counts, firsts = [c for c, _ in reports], [f for _, f in reports]
    if sum(counts) != corpus_total or len(set(firsts)) != world_size:
        raise RuntimeError(f"sharding is broken: counts {counts} (corpus {corpus_total}), firsts {firsts}")
    if rank == 0:
        print(f"shards ok: {' + '.join(map(str, counts))} = {corpus_total} sentences, "
              f"{world_size} different first sentences", flush=True)
    return {"shard_sentences": counts, "first_sentences": firsts}
    ### END SOLUTION
