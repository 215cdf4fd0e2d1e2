"""The sentence generator: random clauses of the grammar, rendered sentences, minimal pairs, and
the vocabulary of every token the grammar can emit."""

import random
from typing import NamedTuple

from minitrain.corpus.lexicon import (ADJECTIVES, ADVERBIALS, ANIMAL, ANIMALS, DETERMINERS,
                                      MASS_NOUNS, MOODS, PEOPLE, POSSESSIVES, PRONOUNS, TENSES,
                                      VERBS, Adverbial, Verb)
from minitrain.corpus.morphology import _article, _capitalize, plural, verb_forms
from minitrain.tokenizer import Tokenizer

MIN_TOKENS, MAX_TOKENS = 4, 12  # counting the final "." or "?"


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


def grammar_tokenizer() -> Tokenizer:
    """The tokenizer of the grammar's vocabulary, without reading any file."""
    return Tokenizer(vocabulary())
