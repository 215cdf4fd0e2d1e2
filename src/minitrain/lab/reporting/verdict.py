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


def times_compared(who: str, than: str, mine_ms: Sequence[float], theirs_ms: Sequence[float]) -> str:
    """"`who` is faster than `than`: ...", or slower, or neither, by verdict_over_repeats on two sides' times: the
    sentence a per-world-size verdict line ends with (`than` names the other side, `who` this one)."""
    said = verdict_over_repeats(mine_ms, theirs_ms, higher_is_faster=False)
    if said == "faster":
        return f"{who} faster than {than}: each of its {len(mine_ms)} repeats beat each of the other's"
    if said == "slower":
        return f"{who} slower than {than}: each of its {len(mine_ms)} repeats lost to each of the other's"
    return (f"{who} not clearly faster or slower than {than} by the lab's rule: the ranges of their {len(mine_ms)} "
            "repeats (each the median over the ranks) overlap")
