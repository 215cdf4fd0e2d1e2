"""Command-line parsing for the lab's scripts: a bad argument or environment variable ends at once,
in one line that names it and the fix, with exit status 2, before anything is written or any
process is started."""

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

BAD_USAGE = 2  # the exit status of a bad argument, input or setting reported in one line (argparse's)
QUIET_RANK_WAIT_S = 1.0  # how long the other ranks wait to exit: the launcher stops a run at the first failure
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0  # a lost peer must end the run in seconds, not after torch's 30 minutes


class SettingError(ValueError):
    """A bad environment variable or notebook parameter; the message names it and the fix, in one line."""


class LabArgumentParser(argparse.ArgumentParser):
    """argparse, with errors in one line (no usage block) and, under torchrun, from rank 0 only; the
    lab's environment variables (`check_environment`) are checked along with the arguments."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self._fail(f"{message} (see --help)")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed = super().parse_known_args(args, namespace)
        try:
            check_environment()
        except SettingError as e:
            self._fail(str(e))
        return parsed

    def _fail(self, message: str) -> None:
        if os.environ.get("RANK", "0") == "0":  # every rank parses the same argv: one report is enough
            self._print_message(f"{self.prog}: error: {message}\n", None)
        else:
            time.sleep(QUIET_RANK_WAIT_S)  # rank 0 says why before its launcher sees a rank end and stops the others
        self.exit(BAD_USAGE)


@contextlib.contextmanager
def exit_on_bad_input(who: str) -> Iterator[None]:
    """Bad input read inside (a missing or malformed file, a bad value): one line on stderr naming
    `who` and the problem, then exit status 2, without a traceback."""
    try:
        yield
    except (OSError, ValueError) as e:  # a CorpusError is a ValueError whose message names the fix
        print(f"[{who}] error: {e}", file=sys.stderr, flush=True)
        sys.exit(BAD_USAGE)


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


# The environment variables the lab's runs read, each checked where it is used and, by
# LabArgumentParser, before a script starts anything. An empty value counts as unset, as in torch.

def collective_timeout_s() -> float:
    """$MINITRAIN_COLLECTIVE_TIMEOUT in seconds (a number above 0), 60 when unset."""
    text = os.environ.get("MINITRAIN_COLLECTIVE_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_COLLECTIVE_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise SettingError(f"MINITRAIN_COLLECTIVE_TIMEOUT={text} is not a number of seconds above 0: unset it "
                           f"for the default ({DEFAULT_COLLECTIVE_TIMEOUT_S:.0f} s), or set e.g. "
                           "MINITRAIN_COLLECTIVE_TIMEOUT=120")
    return seconds


def master_port() -> int:
    """$MASTER_PORT, the rendezvous port on 127.0.0.1 (0 or unset: a free one)."""
    text = os.environ.get("MASTER_PORT", "").strip()
    if not text:
        return 0
    if not (text.isdigit() and int(text) <= 65535):
        raise SettingError(f"MASTER_PORT={text} is not a TCP port (a whole number from 1 to 65535): unset it "
                           "to let the lab pick a free port, or set e.g. MASTER_PORT=29500")
    return int(text)


def lab_out_folder() -> Path | None:
    """$MINITRAIN_LAB_OUT, the folder for the lab's runs and artifacts (None when unset): it may not
    exist yet, but neither it nor a folder above it may be a file."""
    text = os.environ.get("MINITRAIN_LAB_OUT", "").strip()
    if not text:
        return None
    path = Path(text).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise SettingError(f"MINITRAIN_LAB_OUT={text} is not a folder ({existing} is a file): unset it for "
                           "the lab's default folder, or name a folder (it is created if missing)")
    return path


def check_environment() -> None:
    """Raise SettingError for the first of the lab's environment variables that is set badly."""
    collective_timeout_s()
    master_port()
