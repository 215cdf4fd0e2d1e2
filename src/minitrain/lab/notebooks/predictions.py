"""Predictions that count: the learner writes a guess before a measurement, and the notebook shows
it beside what was measured. Guesses are kept in the lab's scratch folder (predictions.json)."""

import json

from minitrain.artifacts import write_json
from minitrain.lab.reporting.runs import scratch_dir


def _path():
    return scratch_dir("predictions") / "predictions.json"


def _all() -> dict[str, str]:
    path = _path()
    return json.loads(path.read_text()) if path.is_file() else {}


def predict(question: str, guess: str) -> str:
    """Record `guess` (a few words, your own) for `question`; return the line the cell prints."""
    if not isinstance(guess, str):
        raise TypeError(f"write your guess as text in quotes, e.g. predict({question!r}, \"...\"), got {guess!r}")
    guesses = _all() | {question: guess.strip()}
    write_json(_path(), guesses)
    return f"your prediction for {question!r}: {guess.strip()!r}" if guess.strip() else \
        f"no prediction for {question!r} yet: write your guess between the quotes and run the cell again"


def reveal(question: str, measured: str) -> str:
    """Your prediction for `question` beside what was measured."""
    guess = _all().get(question, "")
    said = f"you predicted: {guess!r}" if guess else "you made no prediction"
    return f"{question}: {said}\nmeasured: {measured}"
