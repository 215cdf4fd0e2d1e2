"""The lexicon: pronouns, nouns, determiners, verbs with the words they combine with, tenses,
moods and time adverbials."""

from typing import NamedTuple

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
