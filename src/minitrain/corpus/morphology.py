"""Spelling rules: plurals, the he/she/it form, past forms, participles, "a"/"an" and capitals."""

from minitrain.corpus.lexicon import IRREGULAR_PLURALS, IRREGULAR_VERBS


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
