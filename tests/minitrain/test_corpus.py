"""The corpus: pinned bytes, disjoint splits, a grammatical sentence on every line, minimal pairs."""

import json
import shutil

import pytest

from minitrain.corpus import (FILES, TENSES, GrammarError, ensure_corpus, generate_corpus, main,
                              parse, past, past_participle, plural, present_participle,
                              third_person, vocabulary)
from minitrain.tokenizer import Tokenizer

# Any change to the lexicon or the generator changes these: update them on purpose, never by accident.
EXPECTED_SHA256 = {
    "train.jsonl": "d3cd603f9def966db5d4c2e2562711f5c3842f2d52aece1dd00497e4bc33f0d3",
    "val.jsonl": "e536ee42f5ed86293f8d73386ccb77e69a3b6c2ba3a30d2e82fc5fa571bafb3f",
    "pairs.jsonl": "3023ac0e964194c69c878dae8c8493d2982abf4892219e87c5a74a10ff8cd76d",
}
PRONOUNS = ("I", "you", "he", "she", "it", "we", "they")
IRREGULAR_PLURALS = ("children", "people", "men", "women", "mice", "geese")
IRREGULAR_PASTS = ("ate", "went", "saw", "wrote", "drank", "ran", "swam", "sang", "bought", "made",
                   "took", "found", "drew", "slept", "brought", "caught", "threw", "broke", "built",
                   "rode", "drove", "sat")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    return out, generate_corpus(out)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def train(generated) -> list[str]:
    return [r["text"] for r in read_jsonl(generated[0] / "train.jsonl")]


@pytest.fixture(scope="module")
def val(generated) -> list[str]:
    return [r["text"] for r in read_jsonl(generated[0] / "val.jsonl")]


@pytest.fixture(scope="module")
def pairs(generated) -> list[dict]:
    return read_jsonl(generated[0] / "pairs.jsonl")


def parse_or_fail(sentence: str):
    try:
        return parse(sentence)
    except GrammarError as e:
        pytest.fail(f"{sentence!r}: {e}")


@pytest.fixture(scope="module")
def parses(train, val) -> dict:
    return {s: parse_or_fail(s) for s in train + val}


def test_bytes_are_pinned_and_repeat(generated, tmp_path):
    out, sums = generated
    assert {name: sums[name] for name in EXPECTED_SHA256} == EXPECTED_SHA256
    assert generate_corpus(tmp_path) == sums
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)  # no temp files left


def test_every_line_is_one_exact_json_object(generated):
    out, _ = generated
    for name, keys in [("train.jsonl", ["text"]), ("val.jsonl", ["text"]),
                       ("pairs.jsonl", ["good", "bad", "error"])]:
        text = (out / name).read_text(encoding="utf-8")
        assert text.endswith("\n")
        for line in text.splitlines():
            record = json.loads(line)
            assert list(record) == keys and all(isinstance(v, str) for v in record.values())
            assert json.dumps(record, ensure_ascii=False) == line


def test_sizes_and_disjoint_splits(train, val, pairs):
    assert len(train) == len(set(train)) >= 20_000
    assert len(val) == len(set(val)) >= 1_000
    assert not set(train) & set(val)
    goods = [p["good"] for p in pairs]
    assert len(goods) == len(set(goods)) >= 1_000
    assert not set(goods) & (set(train) | set(val))


def test_vocab_file_is_the_grammar_vocabulary(generated):
    out, _ = generated
    assert Tokenizer.load(out / "vocab.json").tokens == Tokenizer(vocabulary()).tokens
    assert vocabulary() == vocabulary() and len(set(vocabulary())) == len(vocabulary())


def test_sentence_shape(train, val):
    for s in train + val:
        words = s.split(" ")
        assert 4 <= len(words) <= 12 and "" not in words, s
        assert words[0][0].isupper() and words[-1] in (".", "?"), s
        assert (words[-1] == "?") == (words[0] in {"Am", "Is", "Are", "Was", "Were", "Has", "Have",
                                                   "Do", "Does", "Did", "Will"}), s
        for article, following in zip(words, words[1:]):
            if article.lower() in ("a", "an"):
                assert (article.lower() == "an") == (following[0] in "aeiou"), s


def test_every_sentence_parses(parses):
    # the fixture parsed them all and fails on the first ungrammatical one
    assert len(parses) >= 22_000


def test_pronoun_agreement_by_a_literal_table(train, val):
    # a check independent of minitrain.corpus: which auxiliaries each pronoun may take
    allowed = {"i": {"am", "was", "have", "do"}, "you": {"are", "were", "have", "do"},
               "we": {"are", "were", "have", "do"}, "they": {"are", "were", "have", "do"},
               "he": {"is", "was", "has", "does"}, "she": {"is", "was", "has", "does"},
               "it": {"is", "was", "has", "does"}}
    agreeing = set().union(*allowed.values())
    checked = 0
    for s in train + val:
        words = s.lower().split()
        # statements: "she has ...", questions: "has she ...?"
        for pronoun, aux in [*zip(words, words[1:]), (words[1], words[0])]:
            if pronoun in allowed and aux in agreeing:
                assert aux in allowed[pronoun], s
                checked += 1
    assert checked > 5_000


def test_time_words_match_the_tense_by_a_literal_table(train, val):
    # also independent of minitrain.corpus: time words against the auxiliaries they rule out
    rules = [
        ({"tomorrow", "next", "soon"}, {"am", "is", "are", "was", "were", "has", "have", "do",
                                        "does", "did"}),
        ({"yesterday", "last"}, {"will", "am", "is", "are", "has", "have", "do", "does"}),
        ({"every", "usually", "often", "always", "sometimes"}, {"will", "was", "were", "did",
                                                                 "has", "have", "am", "is", "are"}),
        ({"already", "just", "yet"}, {"will", "was", "were", "did", "am", "is", "are", "do",
                                      "does"}),
        ({"now", "moment"}, {"will", "was", "were", "did", "has", "have", "do", "does"}),
    ]
    for s in train + val:
        words = set(s.lower().split())
        for time_words, ruled_out in rules:
            if words & time_words:
                assert not words & ruled_out, s
        if words & {"tomorrow", "next", "soon"}:
            assert "will" in words, s


@pytest.mark.parametrize("sentence", [
    "The children plays in the park .",
    "He have eaten an apple .",
    "I is reading a book .",
    "You was sleeping .",
    "Does the children play ?",
    "The child play in the park .",
    "Yesterday the dog will eat an apple .",
    "Tomorrow she ate an apple .",
    "She has eaten an apple yesterday .",
    "She is sleeping at home yesterday .",
    "She has ate an apple .",
    "Does the child plays ?",
    "She does eat an apple .",
    "She not eats an apple .",
    "She eats a apple .",
    "She eats a bread .",
    "These child play in the park .",
    "The dog reads a book .",
    "She sleeps a book .",
    "She eats .",
    "She is seeing a bird .",
    "the dog eats an apple .",
    "The dog eats an apple",
])
def test_checker_rejects_bad_sentences(sentence):
    with pytest.raises(GrammarError):
        parse(sentence)


@pytest.mark.parametrize("sentence, tense, mood", [
    ("The children play in the park .", "present", "statement"),
    ("Does she eat an apple ?", "present", "question"),
    ("He has eaten an apple .", "present_perfect", "statement"),
    ("Has she eaten the apple yet ?", "present_perfect", "question"),
    ("I am not reading a book right now .", "present_progressive", "negative"),
    ("Yesterday the mice were sleeping at home .", "past_progressive", "statement"),
    ("I read a book yesterday .", "past", "statement"),
    ("The women will not go home tomorrow .", "future", "negative"),
])
def test_checker_accepts_and_analyses_good_sentences(sentence, tense, mood):
    result = parse(sentence)
    assert (result.tense, result.mood) == (tense, mood)


def test_spelling_rules():
    assert [third_person(v) for v in ("play", "watch", "fix", "study", "go", "have", "miss")] == \
        ["plays", "watches", "fixes", "studies", "goes", "has", "misses"]
    assert [past(v) for v in ("play", "study", "stop", "plan", "arrive", "visit", "open", "eat")] == \
        ["played", "studied", "stopped", "planned", "arrived", "visited", "opened", "ate"]
    assert [past_participle(v) for v in ("eat", "write", "go", "play")] == \
        ["eaten", "written", "gone", "played"]
    assert [present_participle(v) for v in ("run", "write", "see", "study", "swim", "visit")] == \
        ["running", "writing", "seeing", "studying", "swimming", "visiting"]
    assert [plural(n) for n in ("child", "fox", "puppy", "key", "bus", "person")] == \
        ["children", "foxes", "puppies", "keys", "buses", "people"]


def test_coverage(parses):
    subjects = {p.subject for p in parses.values()}
    assert set(PRONOUNS) <= subjects
    assert set(IRREGULAR_PLURALS) <= subjects
    assert {p.tense for p in parses.values()} == set(TENSES)
    moods = [p.mood for p in parses.values()]
    assert min(moods.count("negative"), moods.count("question")) > 1_000
    past_words = {w for s, p in parses.items() if p.tense == "past" for w in s.split()}
    assert len(past_words & set(IRREGULAR_PASTS)) >= 15
    words = {w.lower() for s in parses for w in s.split()}
    assert {"eaten", "written", "gone"} <= words
    assert {"yesterday", "tomorrow", "already", "just", "yet", "usually", "every", "last", "next",
            "now", "moment"} <= words


def test_train_mixes_tenses(train):
    assert {parse(s).tense for s in train[:100]} == set(TENSES)


def test_minimal_pairs(pairs):
    vocab = set(vocabulary())
    assert {p["error"] for p in pairs} == {"agreement", "tense"}
    for pair in pairs:
        good, bad = pair["good"].split(" "), pair["bad"].split(" ")
        assert len(good) == len(bad) and sum(g != b for g, b in zip(good, bad)) == 1, pair
        assert set(bad) <= vocab, pair
        parse_or_fail(pair["good"])
        with pytest.raises(GrammarError) as info:
            parse(pair["bad"])
        # the checker finds the kind of error the pair claims
        assert ("agree" if pair["error"] == "agreement" else "tense") in str(info.value), pair


def test_ensure_corpus_keeps_existing_files(generated, tmp_path):
    for name in FILES:
        shutil.copy(generated[0] / name, tmp_path / name)
    (tmp_path / "train.jsonl").write_text("kept\n")
    assert ensure_corpus(tmp_path) == tmp_path
    assert (tmp_path / "train.jsonl").read_text() == "kept\n"
    (tmp_path / "val.jsonl").unlink()  # one file missing: generate all of them again
    ensure_corpus(tmp_path)
    assert (tmp_path / "train.jsonl").read_bytes() == (generated[0] / "train.jsonl").read_bytes()
    assert (tmp_path / "val.jsonl").is_file()


def test_cli_prints_counts_and_checksums(tmp_path, capsys):
    main(["--out", str(tmp_path / "new")])
    printed = capsys.readouterr().out
    assert "train.jsonl" in printed and "24000 lines" in printed
    assert EXPECTED_SHA256["train.jsonl"] in printed
