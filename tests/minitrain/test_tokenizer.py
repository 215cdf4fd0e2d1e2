"""The word-level tokenizer: exact round trips, special ids, save/load and clear load errors."""

import json

import pytest

from minitrain.corpus import generate_corpus, grammar_tokenizer, vocabulary
from minitrain.tokenizer import SPECIAL_TOKENS, Tokenizer

VOCAB_SIZE = 453  # 3 special tokens + 450 words; changes only with the lexicon


@pytest.fixture(scope="module")
def corpus_sentences(tmp_path_factory) -> list[str]:
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out)
    lines = [json.loads(line) for name in ("train.jsonl", "val.jsonl", "pairs.jsonl")
             for line in (out / name).read_text(encoding="utf-8").splitlines()]
    return [r[key] for r in lines for key in ("text", "good", "bad") if key in r]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return grammar_tokenizer()


def test_round_trip_every_corpus_sentence(tok, corpus_sentences):
    assert len(corpus_sentences) > 27_000
    for s in corpus_sentences:
        ids = tok.encode(s)
        assert tok.unk_id not in ids, s
        assert tok.decode(ids) == s


def test_vocab_size_and_special_ids(tok):
    assert tok.vocab_size == VOCAB_SIZE == len(vocabulary()) + len(SPECIAL_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.eos_id) == (0, 1, 2)
    assert tok.tokens[:3] == ["<pad>", "<unk>", "<eos>"]


def test_unknown_word_becomes_unk(tok):
    ids = tok.encode("The dragon eats an apple .")
    assert ids[1] == tok.unk_id and tok.unk_id not in ids[:1] + ids[2:]
    assert tok.decode(ids) == "The <unk> eats an apple ."


def test_decode_splits_at_eos_and_drops_pad(tok):
    a, b = "The dog sleeps at home .", "Does she eat an apple ?"
    ids = tok.encode(a) + [tok.eos_id] + tok.encode(b) + [tok.pad_id, tok.pad_id]
    assert tok.decode(ids) == f"{a}\n{b}"


def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "vocab.json"
    tok.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.tokens == tok.tokens and loaded.vocab_size == tok.vocab_size
    assert json.loads(path.read_text(encoding="utf-8")) == tok.tokens


def test_load_missing_file_names_it_and_the_fix(tmp_path):
    path = tmp_path / "nowhere" / "vocab.json"
    with pytest.raises(FileNotFoundError) as info:
        Tokenizer.load(path)
    assert str(path) in str(info.value) and "python -m minitrain.corpus" in str(info.value)


@pytest.mark.parametrize("content", [
    b'["<pad>", "<unk>", "<eos>", "the"',  # cut short
    b"\xff\xfe",  # not UTF-8
    b'{"tokens": []}',  # not a list
    b'["the", "dog"]',  # no special tokens
    b'["<pad>", "<unk>", "<eos>", "the", "the"]',  # repeats
])
def test_load_corrupt_file_names_it_and_the_fix(tmp_path, content):
    path = tmp_path / "vocab.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        Tokenizer.load(path)
    assert str(path) in str(info.value) and "python -m minitrain.corpus" in str(info.value)
