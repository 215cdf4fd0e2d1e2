"""Command-line parsing for the lab's scripts: a bad argument ends at once, in one line that names
it and the fix, with exit status 2, before anything is written or any process is started."""

import argparse
import os
from pathlib import Path


class LabArgumentParser(argparse.ArgumentParser):
    """argparse, with errors in one line (no usage block) and, under torchrun, from rank 0 only."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if os.environ.get("RANK", "0") == "0":  # every rank parses the same argv: one report is enough
            self._print_message(f"{self.prog}: error: {message} (see --help)\n", None)
        self.exit(2)


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    return _checked(text, int, lambda v: v >= 1, "a whole number of at least 1")


def nonnegative_int(text: str) -> int:
    """An integer of at least 0."""
    return _checked(text, int, lambda v: v >= 0, "a whole number of at least 0")


def positive_float(text: str) -> float:
    """A finite number above 0."""
    return _checked(text, float, lambda v: 0 < v < float("inf"), "a number above 0")


def output_folder(text: str) -> Path:
    """A folder to write into: it may not exist yet, but it must not be a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: choose a folder (it is created if missing)")
    return path


def _checked(text: str, kind: type, ok, wanted: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text} is not {wanted}")
    return value
