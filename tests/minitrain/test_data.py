import random

import pytest
import torch

from minitrain.data import CorpusError, load_corpus, make_shard
from minitrain.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def sentences(corpus_dir):
    return load_corpus(corpus_dir / "train.jsonl")


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shards_are_disjoint_and_cover_the_corpus(corpus_dir, sentences, world_size):
    shards = [make_shard(r, world_size, corpus_dir) for r in range(world_size)]
    assert sum(s.num_sentences for s in shards) == len(sentences)
    for rank, shard in enumerate(shards):
        assert shard.sentences == [s for i, s in enumerate(sentences) if i % world_size == rank]
        assert shard.first_sentence in shard.sentences
    assert len({s.first_sentence for s in shards}) == world_size
    # disjoint by index; the corpus has distinct sentences, so also by text
    assert len(set().union(*(set(s.sentences) for s in shards))) == len(sentences)


def test_first_sentence_is_the_first_one_trained_on(corpus_dir):
    tokenizer = Tokenizer.load(corpus_dir / "vocab.json")
    for rank in range(2):
        shard = make_shard(rank, 2, corpus_dir, batch_size=2, block_size=32)
        first = tokenizer.encode(shard.first_sentence)
        inputs, _ = next(shard)
        assert inputs[0, :len(first)].tolist() == first  # the batch opens with it
        order = list(range(shard.num_sentences))
        random.Random(35000 + rank).shuffle(order)  # the sheet's per-rank seed decides the order
        assert shard.first_sentence == shard.sentences[order[0]]


def test_batches_are_shifted_packed_and_deterministic(corpus_dir):
    a = make_shard(0, 2, corpus_dir, batch_size=4, block_size=16)
    b = make_shard(0, 2, corpus_dir, batch_size=4, block_size=16)
    for _ in range(3):
        (xa, ya), (xb, yb) = next(a), next(b)
        assert xa.shape == ya.shape == (4, 16) and xa.dtype == torch.long
        assert torch.equal(xa[:, 1:], ya[:, :-1])  # targets are inputs shifted by one
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    other = make_shard(1, 2, corpus_dir, batch_size=4, block_size=16)
    assert not torch.equal(next(other)[0], next(make_shard(0, 2, corpus_dir, batch_size=4, block_size=16))[0])


def test_stream_is_endless(corpus_dir):
    shard = make_shard(0, 1, corpus_dir, split="val", batch_size=64, block_size=64)
    tokens_needed = 3 * shard.num_sentences * 12  # several epochs of the shard
    for _ in range(tokens_needed // (64 * 65) + 1):
        next(shard)


@pytest.mark.parametrize("rank, world_size, match", [
    (2, 2, r"rank must be in \[0, 1\]"),
    (-1, 2, "rank must be"),
    (0, 0, "world_size must be an integer >= 1"),
])
def test_bad_arguments_raise(corpus_dir, rank, world_size, match):
    with pytest.raises(ValueError, match=match):
        make_shard(rank, world_size, corpus_dir)


def test_empty_shard_raises(tmp_path, corpus_dir):
    (tmp_path / "vocab.json").write_bytes((corpus_dir / "vocab.json").read_bytes())
    (tmp_path / "train.jsonl").write_text('{"text": "The dog sleeps ."}\n')
    with pytest.raises(ValueError, match="rank 1 gets an empty shard.*at most 1 processes"):
        make_shard(1, 2, tmp_path)


@pytest.mark.parametrize("content, match", [
    (b'{"text": "ok ."}\n{"text": broken\n', r"train.jsonl:2: not a JSON object"),
    (b'{"text": "ok ."}\n["a list"]\n', r"train.jsonl:2: expected \{\"text\""),
    (b'{"text": "caf\xe9 ."}\n', r"train.jsonl:1: not UTF-8"),
    (b'', r"holds no sentences"),
])
def test_corrupt_corpus_names_file_and_line(tmp_path, content, match):
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=match) as info:
        load_corpus(path)
    assert "python -m minitrain.corpus" in str(info.value)


def test_missing_corpus_names_the_file(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "nowhere.jsonl")
