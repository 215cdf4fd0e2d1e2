"""The verdict over repeats: is one side faster than the other, or do their repeats overlap?"""

import math
from collections.abc import Sequence

VERDICTS = ("faster", "slower", "no clear winner")


def verdict_over_repeats(candidate: Sequence[float], baseline: Sequence[float], higher_is_faster: bool = True) -> str:
    """'faster' or 'slower' when the candidate's repeats (min-max) lie wholly above or below the
    baseline's, else 'no clear winner'; `higher_is_faster` for throughputs, False for times."""
    if not candidate or not baseline:
        raise ValueError(f"a verdict needs repeats on both sides, got {len(candidate)} and {len(baseline)}")
    above, below = min(candidate) > max(baseline), max(candidate) < min(baseline)
    return "no clear winner" if not (above or below) else "faster" if above == higher_is_faster else "slower"


def chance_of_separation(n_candidate: int, n_baseline: int) -> float:
    """How often repeats of two sides with no real difference still lie wholly apart (either way), as
    verdict_over_repeats reads them: 2 of the C(n + m, n) equally likely orders of the pooled repeats."""
    return 2 / math.comb(n_candidate + n_baseline, n_candidate)
