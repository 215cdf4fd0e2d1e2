"""A deterministic English verb-grammar corpus: a tiny language that a tiny GPT can learn.

The grammar covers subject-verb agreement, six tenses and aspects, negation, yes/no questions
and time adverbials. `parse` re-checks any sentence from its words alone, so tests can verify
everything the generator emits. Run it: `python -m minitrain.corpus --out DIR`.
"""

from minitrain.corpus.command_line import main
from minitrain.corpus.files import FILES, ensure_corpus, generate_corpus
from minitrain.corpus.generator import grammar_tokenizer, vocabulary
from minitrain.corpus.grammar import GrammarError, Parse, parse
from minitrain.corpus.lexicon import TENSES
from minitrain.corpus.morphology import (past, past_participle, plural, present_participle,
                                         third_person)
from minitrain.paths import DEFAULT_CORPUS_DIR

__all__ = [
    "DEFAULT_CORPUS_DIR", "FILES", "TENSES", "GrammarError", "Parse", "ensure_corpus",
    "generate_corpus", "grammar_tokenizer", "main", "parse", "past", "past_participle", "plural",
    "present_participle", "third_person", "vocabulary",
]
