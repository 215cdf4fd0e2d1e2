"""train.py's --fail-at STEP:RANK[:ATTEMPT]: a rank that kills itself (SIGKILL) as a step begins, to
watch torchrun's agent restart the workers and the run resume from its snapshot."""

import argparse
import os
import signal

from minitrain.snapshot import restart_attempt


def fault(text: str) -> tuple[int, int, int]:
    """STEP:RANK or STEP:RANK:ATTEMPT, whole numbers of at least 0."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not STEP:RANK or STEP:RANK:ATTEMPT (whole numbers), e.g. 6:1")
    step, rank, attempt = (int(part) for part in parts + ["0"] * (3 - len(parts)))
    return step, rank, attempt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fail-at", type=fault, action="append", default=None, metavar="STEP:RANK[:ATTEMPT]",
                        help="a fault to watch a restart: rank RANK kills itself (SIGKILL) as step STEP begins, on "
                             "attempt ATTEMPT (torchrun's TORCHELASTIC_RESTART_COUNT; 0, the first, by default); "
                             "repeatable")


def kill_if_due(faults: list[tuple[int, int, int]] | None, step: int, rank: int) -> None:
    """SIGKILL this process when (step, rank, attempt) is one of `faults`; else nothing."""
    attempt = restart_attempt()
    if faults and (step, rank, attempt) in faults:
        print(f"[rank {rank}] fault injected: pid {os.getpid()} kills itself with SIGKILL as step {step} "
              f"begins (attempt {attempt})", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
