"""A word-level tokenizer: one id per space-separated word of the corpus.

The vocabulary holds every surface form the grammar emits, capitalized sentence starters
included ("The" and "the" are two tokens), so decode(encode(s)) == s for every corpus sentence.
"""

import json
from pathlib import Path

SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>")  # ids 0, 1, 2


class Tokenizer:
    def __init__(self, words: list[str]):
        """Build the vocabulary: the special tokens first, then `words` (repeats dropped)."""
        self.tokens = list(dict.fromkeys([*SPECIAL_TOKENS, *words]))
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.pad_id, self.unk_id, self.eos_id = (self.ids[t] for t in SPECIAL_TOKENS)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Split on whitespace and map each word to its id; unknown words become <unk>."""
        return [self.ids.get(word, self.unk_id) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        """Join the words with spaces; <eos> ends a line ("\\n") and <pad> is dropped."""
        lines, words = [], []
        for i in ids:
            if i == self.eos_id:
                lines.append(" ".join(words))
                words = []
            elif i != self.pad_id:
                words.append(self.tokens[i])
        return "\n".join([*lines, " ".join(words)])

    def save(self, path: Path) -> None:
        """Write the vocabulary as a JSON list of tokens, one a line, in id order."""
        text = json.dumps(self.tokens, ensure_ascii=False, indent=0) + "\n"
        Path(path).write_bytes(text.encode("utf-8"))

    @classmethod
    def load(cls, path: Path) -> "Tokenizer":
        """Read a vocabulary written by `save`; a missing or broken file raises with the fix."""
        path = Path(path)
        fix = f"regenerate it with `python -m minitrain.corpus --out {path.parent}`"
        if not path.is_file():
            raise FileNotFoundError(f"vocabulary file {path} does not exist; {fix}")
        try:
            tokens = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"vocabulary file {path} is not valid JSON ({e}); {fix}") from e
        if (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)
                or tuple(tokens[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS
                or len(set(tokens)) != len(tokens)):
            raise ValueError(f"vocabulary file {path} is not a list of distinct tokens starting "
                             f"with {list(SPECIAL_TOKENS)}; {fix}")
        return cls(tokens[len(SPECIAL_TOKENS):])
