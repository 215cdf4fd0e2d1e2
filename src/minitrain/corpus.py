"""A deterministic English verb-grammar corpus: a tiny language that a tiny GPT can learn.

The grammar covers subject-verb agreement, six tenses and aspects, negation, yes/no questions
and time adverbials. `parse` re-checks any sentence from its words alone, so tests can verify
everything the generator emits. Run it: `python -m minitrain.corpus --out DIR`.
"""

import argparse
import hashlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from minitrain.artifacts import write_atomic
from minitrain.tokenizer import Tokenizer

DEFAULT_CORPUS_DIR = Path(__file__).resolve().parents[2] / "data" / "corpus"
FILES = ("train.jsonl", "val.jsonl", "pairs.jsonl", "vocab.json")
SEED = 1337
N_TRAIN, N_VAL, N_PAIRS = 24_000, 2_000, 1_000
MIN_TOKENS, MAX_TOKENS = 4, 12  # counting the final "." or "?"

# ----------------------------------------------------------------------------------------------
# Lexicon

HUMAN, ANIMAL = "human", "animal"
ANYONE = (HUMAN, ANIMAL)
PEOPLE_ONLY = (HUMAN,)

# pronoun -> (person, number, what it can refer to); "you" agrees like a plural: you are, you were
PRONOUNS = {
    "I": (1, "sg", PEOPLE_ONLY),
    "you": (2, "pl", PEOPLE_ONLY),
    "he": (3, "sg", PEOPLE_ONLY),
    "she": (3, "sg", PEOPLE_ONLY),
    "it": (3, "sg", (ANIMAL,)),
    "we": (1, "pl", PEOPLE_ONLY),
    "they": (3, "pl", ANYONE),
}
PEOPLE = ("child", "person", "man", "woman", "teacher", "student", "girl", "boy", "doctor",
          "farmer", "lady")
ANIMALS = ("dog", "cat", "mouse", "bird", "horse", "fox", "puppy", "goose")
IRREGULAR_PLURALS = {"child": "children", "person": "people", "man": "men", "woman": "women",
                     "mouse": "mice", "goose": "geese"}
MASS_NOUNS = ("bread", "water", "milk", "juice", "tea")  # no "a", no plural: "some bread"
ADJECTIVES = ("little", "old", "young", "happy", "hungry", "angry")  # only for people and animals

ALL_NUMBERS = ("sg", "pl", "mass")
# determiner -> the kinds of noun it can introduce; "a" is written "an" before a vowel
DETERMINERS = {
    "the": ALL_NUMBERS, "a": ("sg",), "this": ("sg", "mass"), "that": ("sg", "mass"),
    "these": ("pl",), "those": ("pl",), "some": ("pl", "mass"), "my": ALL_NUMBERS,
    "your": ALL_NUMBERS, "his": ALL_NUMBERS, "her": ALL_NUMBERS, "our": ALL_NUMBERS,
    "their": ALL_NUMBERS,
}
POSSESSIVES = ("my", "your", "his", "her", "our", "their")  # "my dog", but not "my woman"

# verb -> (past simple, past participle); every other verb follows the spelling rules below
IRREGULAR_VERBS = {
    "eat": ("ate", "eaten"), "drink": ("drank", "drunk"), "read": ("read", "read"),
    "write": ("wrote", "written"), "see": ("saw", "seen"), "buy": ("bought", "bought"),
    "make": ("made", "made"), "take": ("took", "taken"), "find": ("found", "found"),
    "draw": ("drew", "drawn"), "catch": ("caught", "caught"), "bring": ("brought", "brought"),
    "throw": ("threw", "thrown"), "break": ("broke", "broken"), "build": ("built", "built"),
    "ride": ("rode", "ridden"), "drive": ("drove", "driven"), "sing": ("sang", "sung"),
    "sleep": ("slept", "slept"), "run": ("ran", "run"), "swim": ("swam", "swum"),
    "sit": ("sat", "sat"), "go": ("went", "gone"),
}


class Verb(NamedTuple):
    base: str
    subjects: tuple[str, ...]  # who can do it: PEOPLE_ONLY or ANYONE
    objects: tuple[str, ...] = ()  # nouns that make sense as its direct object
    endings: tuple[tuple[str, ...], ...] = ()  # what else may follow it; () is "nothing"
    progressive: bool = True  # "she is seeing a bird" sounds wrong: see and find are states


VERBS = (
    # transitive: always with an object that fits the verb
    Verb("eat", ANYONE, ("apple", "orange", "egg", "banana", "sandwich", "cake", "bread")),
    Verb("drink", ANYONE, ("water", "milk", "juice", "tea")),
    Verb("read", PEOPLE_ONLY, ("book", "letter", "newspaper", "story", "email")),
    Verb("write", PEOPLE_ONLY, ("letter", "story", "poem", "email", "song")),
    Verb("watch", ANYONE, ("movie", "game", "bird", "horse")),
    Verb("fix", PEOPLE_ONLY, ("car", "bike", "door", "chair", "computer")),
    Verb("study", PEOPLE_ONLY, ("lesson", "map", "book", "word")),
    Verb("see", ANYONE, ("bird", "car", "house", "tree", "star"), progressive=False),
    Verb("buy", PEOPLE_ONLY, ("apple", "book", "car", "bike", "ticket", "bread")),
    Verb("make", PEOPLE_ONLY, ("cake", "sandwich", "tea", "bread", "kite")),
    Verb("take", PEOPLE_ONLY, ("book", "umbrella", "key", "ticket")),
    Verb("find", ANYONE, ("key", "ball", "book", "coin"), progressive=False),
    Verb("draw", PEOPLE_ONLY, ("picture", "map", "house", "tree")),
    Verb("catch", ANYONE, ("ball", "mouse", "bird")),
    Verb("bring", PEOPLE_ONLY, ("book", "key", "letter", "cake", "umbrella")),
    Verb("throw", PEOPLE_ONLY, ("ball", "stone")),
    Verb("break", ANYONE, ("window", "cup", "plate", "chair")),
    Verb("build", PEOPLE_ONLY, ("house", "wall", "boat", "bridge")),
    Verb("ride", PEOPLE_ONLY, ("bike", "horse")),
    Verb("drive", PEOPLE_ONLY, ("car", "bus", "truck")),
    Verb("wash", PEOPLE_ONLY, ("car", "dog", "cup", "plate", "window")),
    Verb("carry", PEOPLE_ONLY, ("box", "bag", "book")),
    Verb("stop", PEOPLE_ONLY, ("car", "bus", "game")),
    Verb("plan", PEOPLE_ONLY, ("trip", "party")),
    Verb("clean", PEOPLE_ONLY, ("room", "kitchen", "car", "window")),
    Verb("open", PEOPLE_ONLY, ("door", "window", "box", "letter")),
    Verb("visit", PEOPLE_ONLY, ("museum", "zoo", "farm", "friend")),
    Verb("miss", PEOPLE_ONLY, ("bus", "train")),
    Verb("climb", ANYONE, ("tree", "wall", "hill")),
    # with or without an object
    Verb("sing", PEOPLE_ONLY, ("song",), ((), ("in", "the", "garden"))),
    # intransitive: never an object, sometimes a place
    Verb("sleep", ANYONE, (), ((), ("at", "home"), ("in", "the", "garden"), ("on", "the", "sofa"))),
    Verb("run", ANYONE, (), ((), ("home",), ("in", "the", "park"))),
    Verb("laugh", PEOPLE_ONLY, (), ((),)),
    Verb("arrive", PEOPLE_ONLY, (), ((), ("at", "home"), ("at", "the", "station"), ("late",),
                                     ("early",))),
    Verb("swim", ANYONE, (), ((), ("in", "the", "river"), ("in", "the", "lake"))),
    Verb("cry", PEOPLE_ONLY, (), ((),)),
    Verb("smile", PEOPLE_ONLY, (), ((),)),
    Verb("dance", PEOPLE_ONLY, (), ((), ("in", "the", "kitchen"))),
    Verb("walk", ANYONE, (), ((), ("home",), ("in", "the", "park"))),
    Verb("jump", ANYONE, (), ((), ("in", "the", "garden"))),
    Verb("wait", PEOPLE_ONLY, (), ((), ("at", "home"), ("at", "the", "station"))),
    Verb("sit", ANYONE, (), (("on", "the", "sofa"), ("in", "the", "garden"))),
    Verb("go", ANYONE, (), (("home",), ("to", "the", "park"), ("to", "the", "river"))),
    Verb("play", ANYONE, (), ((), ("in", "the", "park"), ("in", "the", "garden"))),
)

TENSES = ("present", "past", "present_progressive", "past_progressive", "present_perfect",
          "future")
MOODS = ("statement", "negative", "question")


class Adverbial(NamedTuple):
    words: tuple[str, ...]
    tenses: tuple[str, ...]  # the tenses it fits
    slots: tuple[str, ...]  # "front" of the sentence, "mid" (before the main verb), "end"
    moods: tuple[str, ...] = MOODS


PAST, FUTURE = ("past", "past_progressive"), ("future",)
ADVERBIALS = (
    Adverbial(("every", "day"), ("present",), ("front", "end")),
    Adverbial(("every", "morning"), ("present",), ("front", "end")),
    Adverbial(("every", "week"), ("present",), ("front", "end")),
    Adverbial(("usually",), ("present",), ("mid",), ("statement",)),
    Adverbial(("often",), ("present",), ("mid",), ("statement",)),
    Adverbial(("always",), ("present",), ("mid",), ("statement",)),
    Adverbial(("sometimes",), ("present",), ("mid",), ("statement",)),
    Adverbial(("yesterday",), PAST, ("front", "end")),
    Adverbial(("last", "night"), PAST, ("front", "end")),
    Adverbial(("last", "week"), ("past",), ("front", "end")),
    Adverbial(("last", "year"), ("past",), ("front", "end")),
    Adverbial(("right", "now"), ("present_progressive",), ("front", "end")),
    Adverbial(("at", "the", "moment"), ("present_progressive",), ("front", "end")),
    Adverbial(("now",), ("present_progressive",), ("end",)),
    Adverbial(("already",), ("present_perfect",), ("mid",), ("statement", "question")),
    Adverbial(("just",), ("present_perfect",), ("mid",), ("statement", "question")),
    Adverbial(("yet",), ("present_perfect",), ("end",), ("negative", "question")),
    Adverbial(("tomorrow",), FUTURE, ("front", "end")),
    Adverbial(("next", "week"), FUTURE, ("front", "end")),
    Adverbial(("next", "year"), FUTURE, ("front", "end")),
    Adverbial(("soon",), FUTURE, ("end",)),
)

# ----------------------------------------------------------------------------------------------
# Spelling rules


def plural(noun: str) -> str:
    """child -> children, fox -> foxes, puppy -> puppies, dog -> dogs."""
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def third_person(verb: str) -> str:
    """The he/she/it present form: plays, watches, fixes, studies, goes, has."""
    if verb == "have":
        return "has"
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _doubles_final_consonant(verb: str) -> bool:
    # one-syllable consonant-vowel-consonant verbs double the consonant: stop -> stopped, running
    vowel_groups = sum(1 for i, c in enumerate(verb)
                       if c in "aeiou" and (i == 0 or verb[i - 1] not in "aeiou"))
    return (vowel_groups == 1 and len(verb) >= 3 and verb[-1] not in "aeiouwxy"
            and verb[-2] in "aeiou" and verb[-3] not in "aeiou")


def past(verb: str) -> str:
    """Past simple: ate, went (irregular); played, studied, stopped, arrived (regular)."""
    if verb in IRREGULAR_VERBS:
        return IRREGULAR_VERBS[verb][0]
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    if _doubles_final_consonant(verb):
        return verb + verb[-1] + "ed"
    return verb + "ed"


def past_participle(verb: str) -> str:
    """The form after has/have: eaten, written, gone; regular verbs reuse the past: played."""
    return IRREGULAR_VERBS[verb][1] if verb in IRREGULAR_VERBS else past(verb)


def present_participle(verb: str) -> str:
    """The -ing form: playing, writing, seeing, running, studying."""
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith("ee"):
        return verb[:-1] + "ing"
    if _doubles_final_consonant(verb):
        return verb + verb[-1] + "ing"
    return verb + "ing"


def verb_forms(verb: str) -> dict[str, str]:
    """All five forms of a verb, keyed base, s, past, pp (past participle) and ing."""
    return {"base": verb, "s": third_person(verb), "past": past(verb),
            "pp": past_participle(verb), "ing": present_participle(verb)}


def _article(next_word: str) -> str:
    return "an" if next_word[0] in "aeiou" else "a"


def _capitalize(word: str) -> str:
    return word[0].upper() + word[1:]


# ----------------------------------------------------------------------------------------------
# Generator


class Clause(NamedTuple):
    words: list[str]  # lower case ("I" aside), final punctuation included
    finite: int  # index of the finite verb or auxiliary: the word that agrees with the subject
    verb: Verb
    tense: str
    mood: str
    third_singular: bool  # is the subject he/she/it-like?
    adverbial: Adverbial | None
    adverbial_at: int  # index of the adverbial's first word, -1 without one


def render(words: list[str]) -> str:
    """Join words into a sentence with its first word capitalized."""
    return " ".join([_capitalize(words[0]), *words[1:]])


def _noun_phrase(rng: random.Random, noun: str, number: str,
                 adjective: str | None = None) -> list[str]:
    head = noun if number != "pl" else plural(noun)
    det = rng.choice([d for d, numbers in DETERMINERS.items() if number in numbers
                      and not (noun in PEOPLE and d in POSSESSIVES)])
    rest = [adjective, head] if adjective else [head]
    return [_article(rest[0]) if det == "a" else det, *rest]


def _subject(rng: random.Random, verb: Verb) -> tuple[list[str], int, str]:
    if rng.random() < 0.4:
        pronoun = rng.choice([p for p, (_, _, kinds) in PRONOUNS.items()
                              if any(k in verb.subjects for k in kinds)])
        person, number, _ = PRONOUNS[pronoun]
        return [pronoun], person, number
    nouns = PEOPLE + ANIMALS if ANIMAL in verb.subjects else PEOPLE
    number = rng.choice(("sg", "pl"))
    adjective = rng.choice(ADJECTIVES) if rng.random() < 0.3 else None
    return _noun_phrase(rng, rng.choice(nouns), number, adjective), 3, number


def _verb_group(verb: Verb, tense: str, do_support: bool, person: int,
                number: str) -> tuple[str, list[str]]:
    """The finite word and the rest of the verb group, e.g. ("has", ["eaten"])."""
    forms = verb_forms(verb.base)
    third_singular = person == 3 and number == "sg"
    if tense == "present":
        if do_support:
            return ("does" if third_singular else "do"), [forms["base"]]
        return forms["s" if third_singular else "base"], []
    if tense == "past":
        return ("did", [forms["base"]]) if do_support else (forms["past"], [])
    if tense == "present_progressive":
        be = "am" if (person, number) == (1, "sg") else "is" if third_singular else "are"
        return be, [forms["ing"]]
    if tense == "past_progressive":
        return ("was" if number == "sg" else "were"), [forms["ing"]]
    if tense == "present_perfect":
        return ("has" if third_singular else "have"), [forms["pp"]]
    return "will", [forms["base"]]


def random_clause(rng: random.Random) -> Clause:
    """One random sentence of the grammar, with the facts needed to build a minimal pair."""
    verb = rng.choice(VERBS)
    subject, person, number = _subject(rng, verb)
    tense = rng.choice([t for t in TENSES if verb.progressive or "progressive" not in t])
    mood = rng.choices(MOODS, weights=(2, 1, 1))[0]
    finite, rest = _verb_group(verb, tense, mood != "statement", person, number)

    options = ["object"] * bool(verb.objects) + list(verb.endings)
    ending = rng.choice(options)
    if ending == "object":
        noun = rng.choice(verb.objects)
        number_of_object = "mass" if noun in MASS_NOUNS else rng.choice(("sg", "sg", "pl"))
        ending = _noun_phrase(rng, noun, number_of_object)

    adverbial, slot = None, None
    if rng.random() < 0.6:
        adverbial = rng.choice([a for a in ADVERBIALS if tense in a.tenses and mood in a.moods])
        slots = [s for s in adverbial.slots if not (mood == "question" and s == "front")]
        slot = rng.choice(slots)
    mid = list(adverbial.words) if slot == "mid" else []
    front = list(adverbial.words) if slot == "front" else []
    end = list(adverbial.words) if slot == "end" else []

    # a mid adverb sits right before the main verb: "she usually eats", "she has already eaten"
    if mood == "question":
        words = [finite, *subject, *mid, *rest]
        finite_at = 0
    else:
        negation = ["not"] if mood == "negative" else []
        verb_words = [*mid, finite] if not rest else [finite, *negation, *mid, *rest]
        words = [*front, *subject, *verb_words]
        finite_at = words.index(finite, len(front) + len(subject))
    words += [*ending, *end, "?" if mood == "question" else "."]
    adverbial_at = -1  # where the adverbial starts, for a minimal pair to swap it
    if slot == "front":
        adverbial_at = 0
    elif slot == "mid":
        adverbial_at = words.index(mid[0])
    elif slot == "end":
        adverbial_at = len(words) - 1 - len(end)
    return Clause(words, finite_at, verb, tense, mood, person == 3 and number == "sg", adverbial,
                  adverbial_at)


def _sentences(rng: random.Random, n: int, taken: dict[str, None]) -> list[str]:
    # a dict, not a set: membership is all we ask of it, so the output never depends on hashing
    out: dict[str, None] = {}
    while len(out) < n:
        words = random_clause(rng).words
        if MIN_TOKENS <= len(words) <= MAX_TOKENS:
            sentence = render(words)
            if sentence not in taken:
                out[sentence] = None
    return list(out)


AGREEMENT_SWAP = {"is": "are", "are": "is", "am": "is", "was": "were", "were": "was",
                  "has": "have", "have": "has", "does": "do", "do": "does"}
TENSE_SWAP = {"yesterday": "tomorrow", "tomorrow": "yesterday", "last": "next", "next": "last"}
_ADVERBIAL_WORDS = {a.words for a in ADVERBIALS}


def minimal_pair(clause: Clause, error: str,
                 rng: random.Random) -> tuple[list[str], list[str]] | None:
    """(good, bad) words, bad with one word changed to make an agreement or tense error."""
    bad = list(clause.words)
    i = clause.finite
    forms = verb_forms(clause.verb.base)
    if error == "agreement":
        if bad[i] in AGREEMENT_SWAP:
            bad[i] = AGREEMENT_SWAP[bad[i]]
        elif clause.tense == "present" and forms["base"] != forms["past"]:
            # the main verb agrees itself: play <-> plays; but "he read" would be a fine past
            bad[i] = forms["base"] if clause.third_singular else forms["s"]
        else:
            return None
    elif clause.adverbial and clause.adverbial.words[0] in TENSE_SWAP:
        j = clause.adverbial_at
        swapped = (TENSE_SWAP[bad[j]], *clause.adverbial.words[1:])
        if swapped not in _ADVERBIAL_WORDS:  # "last night" -> "next night" is no adverbial
            return None
        # a past sentence can also keep its "yesterday" and lose its past verb instead
        if clause.tense == "past" and clause.mood == "statement" and rng.random() < 0.5:
            bad[i] = forms["s" if clause.third_singular else "base"]
        else:
            bad[j] = swapped[0]
    else:
        return None
    return (clause.words, bad) if bad != clause.words else None


def _pairs(rng: random.Random, n: int, taken: dict[str, None]) -> list[dict[str, str]]:
    pairs: list[dict[str, str]] = []
    used = dict(taken)
    while len(pairs) < n:
        error = ("agreement", "tense")[len(pairs) % 2]
        clause = random_clause(rng)
        pair = minimal_pair(clause, error, rng)
        if pair is None or not MIN_TOKENS <= len(clause.words) <= MAX_TOKENS:
            continue
        good, bad = render(pair[0]), render(pair[1])
        if good not in used:
            used[good] = None
            pairs.append({"good": good, "bad": bad, "error": error})
    return pairs


def vocabulary() -> list[str]:
    """Every token the grammar can emit, from the lexicon, in a fixed order."""
    nouns = [*PEOPLE, *ANIMALS, *(o for v in VERBS for o in v.objects)]
    words = [".", "?", *PRONOUNS, *DETERMINERS, "an", *ADJECTIVES]
    words += [n for noun in nouns
              for n in ((noun,) if noun in MASS_NOUNS else (noun, plural(noun)))]
    auxiliaries = ["am", "is", "are", "was", "were", "has", "have", "do", "does", "did", "will"]
    words += ["not", *auxiliaries]
    words += [word for v in VERBS for form, word in verb_forms(v.base).items()
              if v.progressive or form != "ing"]
    words += [w for a in ADVERBIALS for w in a.words]
    words += [w for v in VERBS for ending in v.endings for w in ending]
    # a sentence starts with a subject, a fronted adverbial or (in a question) an auxiliary
    starters = [*PRONOUNS, *DETERMINERS, "an", *auxiliaries,
                *(a.words[0] for a in ADVERBIALS if "front" in a.slots)]
    words += [_capitalize(w) for w in starters]
    return list(dict.fromkeys(words))  # drop repeats, keep first-seen order


# ----------------------------------------------------------------------------------------------
# Checker: parses a sentence from its words alone and says why it is not grammatical


class GrammarError(ValueError):
    """The sentence is outside the grammar; the message says where."""


class Parse(NamedTuple):
    subject: str  # the pronoun or head noun as written: "I", "children"
    verb: str  # the main verb's base form
    tense: str
    mood: str


_NOUNS = {n: (n, "mass" if n in MASS_NOUNS else "sg") for v in VERBS for n in v.objects}
_NOUNS |= {plural(n): (n, "pl") for n in list(_NOUNS) if n not in MASS_NOUNS}
_NOUNS |= {form: (n, number) for n in PEOPLE + ANIMALS
           for form, number in ((n, "sg"), (plural(n), "pl"))}
_VERBS = {v.base: v for v in VERBS}


def _index_verb_forms() -> dict[str, list[tuple[str, str]]]:
    """word -> [(verb, form)]; a list because "read" is a base, a past and a participle."""
    index: dict[str, list[tuple[str, str]]] = {}
    for verb in VERBS:
        for form, word in verb_forms(verb.base).items():
            index.setdefault(word, []).append((verb.base, form))
    return index


_FORMS = _index_verb_forms()
# auxiliary -> (the form it needs next, the tense it makes)
_AUXILIARIES = {
    "do": ("base", "present"), "does": ("base", "present"), "did": ("base", "past"),
    "am": ("ing", "present_progressive"), "is": ("ing", "present_progressive"),
    "are": ("ing", "present_progressive"), "was": ("ing", "past_progressive"),
    "were": ("ing", "past_progressive"), "has": ("pp", "present_perfect"),
    "have": ("pp", "present_perfect"), "will": ("base", "future"),
}

_FORM_NAMES = {"base": "a verb's base form", "ing": "an -ing form", "pp": "a past participle"}


def _agrees(finite: str, form: str, person: int, number: str) -> bool:
    if finite in ("is", "has", "does") or form == "s":
        return person == 3 and number == "sg"
    if finite == "am":
        return person == 1 and number == "sg"
    if finite == "was":
        return number == "sg"
    if finite in ("are", "were"):
        return number == "pl"
    if finite in ("have", "do") or form == "base":
        return not (person == 3 and number == "sg")
    return True  # past forms, did and will look the same for every subject


def _at(words: list[str], i: int) -> str:
    return words[i] if i < len(words) else ""


def _noun_phrase_at(words: list[str], i: int) -> tuple[str, str, int]:
    """Parse determiner [adjective] noun at i; return (noun, number, index after it)."""
    det = _at(words, i)
    if det not in DETERMINERS and det != "an":
        raise GrammarError(f"expected a pronoun or determiner, got {det!r}")
    j = i + 1 + (_at(words, i + 1) in ADJECTIVES)
    noun, number = _NOUNS.get(_at(words, j), (None, None))
    if noun is None:
        raise GrammarError(f"expected a noun, got {_at(words, j)!r}")
    if number not in DETERMINERS["a" if det == "an" else det]:
        raise GrammarError(f"{det!r} does not go with {words[j]!r}")
    if det in ("a", "an") and det != _article(words[i + 1]):
        raise GrammarError(f"{det!r} before {words[i + 1]!r}")
    if j > i + 1 and noun not in PEOPLE + ANIMALS:
        raise GrammarError(f"adjectives here only describe people and animals, not {noun!r}")
    if det in POSSESSIVES and noun in PEOPLE:
        raise GrammarError(f"{det} {words[j]!r} sounds odd: people take the, a, this, ...")
    return noun, number, j + 1


def _adverbial_at(words: list[str], i: int, slot: str) -> Adverbial | None:
    """The longest adverbial for this slot starting at i (for "end": the one ending the list)."""
    found = None
    for a in ADVERBIALS:
        n = len(a.words)
        here = tuple(words[-n:]) if slot == "end" else tuple(words[i:i + n])
        if slot in a.slots and here == a.words and (found is None or n > len(found.words)):
            found = a
    return found


def parse(sentence: str) -> Parse:
    """Check a sentence against the grammar; return its analysis or raise GrammarError."""
    tokens = sentence.split(" ")
    if len(tokens) < 3 or tokens[-1] not in (".", "?") or "" in tokens:
        raise GrammarError("a sentence has at least two words and ends with ' .' or ' ?'")
    words = [tokens[0] if tokens[0] == "I" else tokens[0].lower(), *tokens[1:-1]]
    if tokens[0] != _capitalize(words[0]) or any(w not in ("I", w.lower()) for w in words[1:]):
        raise GrammarError("only the first word (and 'I') is capitalized")
    question = tokens[-1] == "?"
    adverbials: list[tuple[Adverbial, str]] = []

    i = 0
    if question:
        if words[0] not in _AUXILIARIES:
            raise GrammarError(f"a question starts with an auxiliary, not {words[0]!r}")
        i = 1
    elif front := _adverbial_at(words, 0, "front"):
        adverbials.append((front, "front"))
        i = len(front.words)

    if _at(words, i) in PRONOUNS:
        subject, (person, number, kinds) = words[i], PRONOUNS[words[i]]
        i += 1
    else:
        noun, number, i = _noun_phrase_at(words, i)
        subject, person = words[i - 1], 3
        kinds = (HUMAN,) if noun in PEOPLE else (ANIMAL,) if noun in ANIMALS else ()

    def mid_adverb() -> None:
        nonlocal i
        if (a := _adverbial_at(words, i, "mid")) is not None:
            adverbials.append((a, "mid"))
            i += 1

    negated = False
    mid_adverb()
    if question:
        finite = words[0]
    else:
        finite = _at(words, i)
        i += 1
        if finite in _AUXILIARIES:
            if adverbials and adverbials[-1][1] == "mid":
                raise GrammarError(f"{adverbials[-1][0].words[0]!r} goes after {finite!r}")
            negated = _at(words, i) == "not"
            i += negated
            mid_adverb()
        elif _at(words, i) == "not":
            raise GrammarError(f"negation needs an auxiliary: {finite!r} not")
    if finite in ("do", "does", "did") and not (negated or question):
        raise GrammarError("do/does/did only appear in negatives and questions")
    mood = "question" if question else "negative" if negated else "statement"

    # the verb group: an auxiliary + the form it asks for, or a finite main verb on its own
    if finite in _AUXILIARIES:
        needed, tense = _AUXILIARIES[finite]
        main = _at(words, i)
        # (main verb, form of the finite word, tense); the auxiliary alone carries agreement
        candidates = [(v, "aux", tense) for v, f in _FORMS.get(main, []) if f == needed]
        if not candidates:
            raise GrammarError(f"after {finite!r} expected {_FORM_NAMES[needed]}, got {main!r}")
        i += 1
    else:
        candidates = [(v, f, "present" if f in ("s", "base") else "past")
                      for v, f in _FORMS.get(finite, []) if f in ("s", "base", "past")]
        if not candidates:
            raise GrammarError(f"expected a verb, got {finite!r}")

    rest = words[i:]
    if end := _adverbial_at(rest, 0, "end"):
        adverbials.append((end, "end"))
        rest = rest[:-len(end.words)]
    if len(adverbials) > 1:
        raise GrammarError("at most one time adverbial per sentence")

    errors = []
    for lemma, form, tense in candidates:  # several when a form is ambiguous: "I read"
        verb = _VERBS[lemma]
        if not _agrees(finite, form, person, number):
            errors.append(f"subject {subject!r} does not agree with {finite!r}")
        elif not any(k in verb.subjects for k in kinds):
            errors.append(f"{subject!r} cannot {lemma}")
        elif "progressive" in tense and not verb.progressive:
            errors.append(f"{lemma!r} is a state, not used in the progressive")
        elif bad := [a for a, slot in adverbials if tense not in a.tenses]:
            errors.append(f"{' '.join(bad[0].words)!r} does not fit the {tense} tense")
        elif bad := [a for a, slot in adverbials if mood not in a.moods or slot not in a.slots]:
            errors.append(f"{' '.join(bad[0].words)!r} does not fit a {mood} here")
        elif (error := _ending_error(verb, rest)) is not None:
            errors.append(error)
        else:
            return Parse(subject, lemma, tense, mood)
    raise GrammarError(errors[0])


def _ending_error(verb: Verb, rest: list[str]) -> str | None:
    if tuple(rest) in verb.endings:
        return None
    if not verb.objects:
        return f"{verb.base!r} cannot be followed by {' '.join(rest)!r}"
    try:
        noun, _, end = _noun_phrase_at(rest, 0)
    except GrammarError as e:
        return f"{verb.base!r} needs an object: {e}"
    if end != len(rest):
        return f"unexpected {' '.join(rest[end:])!r} after the object"
    if noun not in verb.objects:
        return f"you cannot {verb.base} a {noun}"
    return None


# ----------------------------------------------------------------------------------------------
# Files


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
    sums["vocab.json"] = _publish(out_dir / "vocab.json", Tokenizer(vocabulary()).save)
    return sums


def ensure_corpus(out_dir: Path = DEFAULT_CORPUS_DIR) -> Path:
    """Generate the corpus into out_dir unless all its files are already there; return out_dir."""
    out_dir = Path(out_dir)
    if not all((out_dir / name).is_file() for name in FILES):
        generate_corpus(out_dir)
    return out_dir


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


if __name__ == "__main__":
    main()
