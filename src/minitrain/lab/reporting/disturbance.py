"""Repeats disturbed by other programs: a measurement of the machine's other work, not of DDP.

A warning beside the verdict, never a verdict (minitrain.lab.reporting.verdict): the repeats of one
configuration that disagree with each other far beyond a quiet machine's spread, or 2 processes
above twice one process where the single process had no more threads than the two ranks together
(assuming a rank's step, beside the other rank, is never shorter than the single process's).
"""

from collections.abc import Sequence

SPREAD = 0.5  # slowest / fastest repeat of one configuration; a quiet 2-CPU machine gives about 0.9
RERUN = ".venv/bin/python -m minitrain.lab --remeasure"  # make lab reuses complete runs: this measures them again


def disturbance(tps_1proc: Sequence[float], tps_2proc: Sequence[float], threads_1proc: int,
                threads_2proc: int) -> list[str]:
    """Why the repeats (tokens/s, paired in run order) look disturbed, one reason a line; [] when they do not."""
    reasons = []
    for n, tps in ((1, tps_1proc), (2, tps_2proc)):
        if tps and min(tps) < SPREAD * max(tps):
            reasons.append(f"the {n}-process repeats range from {min(tps):,.0f} to {max(tps):,.0f} tokens/s: the "
                           f"slowest is under {SPREAD:.0%} of the fastest, the same configuration varying "
                           f"{max(tps) / min(tps):.1f}x")
    if twice_checked(threads_1proc, threads_2proc):
        above = [(i + 1, b / a) for i, (a, b) in enumerate(zip(tps_1proc, tps_2proc)) if b > 2 * a]
        if above:
            shown = ", ".join(f"{ratio:.2f}x in repeat {i}" for i, ratio in above)
            reasons.append(f"2 processes came out above twice one process ({shown}): a 2-process step does twice the "
                           f"tokens, so a rank's step ({threads_2proc} per rank, beside the other rank) was shorter "
                           f"than the single process's ({threads_1proc} threads); assuming that does not happen "
                           "on a quiet machine, about 2x is the most this setup gives")
    return reasons


def twice_checked(threads_1proc: int, threads_2proc: int) -> bool:
    """Whether `disturbance` tests 2 processes against twice one process: only when the single process had no
    more threads than the two ranks together."""
    return threads_1proc <= 2 * threads_2proc


def disturbance_note(reasons: list[str]) -> str:
    """The warning for disturbed repeats, with the command that measures them again; '' when quiet."""
    if not reasons:
        return ""
    return (f"disturbed: {'; '.join(reasons)}. Such repeats most often come from other programs using the CPUs "
            f"while they ran, and then measure those programs too: close them and re-measure on a quiet machine: "
            f"{RERUN}")
