"""The grammar checker: `parse` re-checks a sentence from its words alone, with its own tables
(never the generator's), and GrammarError says why a sentence is outside the grammar."""

from typing import NamedTuple

from minitrain.corpus.lexicon import (ADJECTIVES, ADVERBIALS, ANIMAL, ANIMALS, DETERMINERS, HUMAN,
                                      MASS_NOUNS, PEOPLE, POSSESSIVES, PRONOUNS, VERBS, Adverbial,
                                      Verb)
from minitrain.corpus.morphology import _article, _capitalize, plural, verb_forms


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
