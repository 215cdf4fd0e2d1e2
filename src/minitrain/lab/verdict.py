"""The verdict over repeats: is one side faster than the other, or do their repeats overlap?"""

from collections.abc import Sequence

VERDICTS = ("faster", "slower", "no clear winner")


def verdict_over_repeats(candidate: Sequence[float], baseline: Sequence[float], higher_is_faster: bool = True) -> str:
    """'faster' or 'slower' when the candidate's repeats (min-max) lie wholly above or below the
    baseline's, else 'no clear winner'; `higher_is_faster` for throughputs, False for times."""
    if not candidate or not baseline:
        raise ValueError(f"a verdict needs repeats on both sides, got {len(candidate)} and {len(baseline)}")
    above, below = min(candidate) > max(baseline), max(candidate) < min(baseline)
    return "no clear winner" if not (above or below) else "faster" if above == higher_is_faster else "slower"
