"""Block G's answer, the teacher's edition only: the paragraph the reference writes from a manifest's numbers.

The student edition leaves this module out (minitrain.lab.editions.student_edition.EXCLUDED): there the learner
writes the paragraph, and stop condition 4 (minitrain.lab.reporting.paragraph) checks its numbers and verdict
without it.
"""

from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.verdict import chance_of_separation


def reference_paragraph(m: Manifest) -> str:
    """Block G's paragraph (1 process against 2, and why), from the manifest's numbers alone:
    the reference edition's Block G (notebook 06), which stop condition 4 must accept."""
    share, (lo, hi), n = m.allreduce_share_of_step, m.speedup_2proc_range, m.repeats["count"]
    t1, t2, cores = m.threads_per_rank["1proc"], m.threads_per_rank["2proc"], m.cores
    ratio = m.step_p50_ms_2proc / m.step_p50_ms_1proc  # the median repeats': their speedup_2proc = 2 / ratio
    outcome = {"faster": "2 processes were faster here", "slower": "2 processes were slower here",
               "no clear winner": "there is no clear winner on this machine"}[m.verdict]
    if m.verdict != "no clear winner":  # how much a clean split of few repeats proves
        odds = (f"with no real difference, {n} repeats a side split this cleanly one time in "
                f"{round(1 / chance_of_separation(n, n))}" if n > 1 else "one repeat a side always splits so")
        outcome += f" (every 2-process repeat {'above' if m.verdict == 'faster' else 'below'} every 1-process one; {odds})"
    shares = m.allreduce_shares()
    spread = (f"{100 * min(shares):.0f}-{100 * max(shares):.0f}% of a 2-process step over the {len(shares)} repeats"
              if len(shares) > 1 else f"{share:.0%} of a 2-process step in the median repeat")
    quoted = '"2-procesos es más lento": 2 processes slower'  # the sheet's words, translated
    sheet = f"The sheet expects {quoted.replace(': ', ' (')})"
    text = [
        f"On {cores} logical CPUs, repeat by repeat, 2 processes ran {m.paired_speedup():.2f}x the tokens/s of 1 "
        f"(median; range {lo:.2f}-{hi:.2f}x), so {outcome}.",
        f"The median repeats ran at {m.tokens_per_sec_2proc:,.0f} tokens/s (2 processes) and "
        f"{m.tokens_per_sec_1proc:,.0f} (1 process): their own ratio is {m.speedup_2proc:.2f}x.",
        f"Each rank does the single process's whole batch ({m.batch_size_per_rank} x {m.block_size} tokens) on "
        f"{plural(t2, 'thread')} against the single process's {t1}, so 2 processes win while a rank's step stays "
        f"under twice the single process's; in the median repeats it took {ratio:.2f}x.",
        f"The all-reduce of {m.gradient_bytes / 1e6:.2f} MB of gradients ({plural(len(m.buckets), 'bucket')}) "
        f"took {spread}, waiting for the other rank included.",
    ]
    # Each branch says only what its condition guarantees. Slower means every 2-process repeat ran
    # below every 1-process one; with the all-reduce under 30% of a step, the rest alone is the larger part.
    if m.verdict == "no clear winner":
        tps = {k: [r["tokens_per_sec"] for r in m.repeats[f"{k}proc"]] for k in (1, 2)}
        steps = {k: [r["step_p50_ms"] for r in m.repeats[f"{k}proc"]] for k in (1, 2)}
        text.append(f"The repeats overlap: 1 process ran at {min(tps[1]):,.0f}-{max(tps[1]):,.0f} tokens/s "
                    f"(median steps {min(steps[1]):.1f}-{max(steps[1]):.1f} ms), 2 processes at "
                    f"{min(tps[2]):,.0f}-{max(tps[2]):,.0f} ({min(steps[2]):.1f}-{max(steps[2]):.1f} ms), so these "
                    f"repeats cannot tell them apart. {sheet}.")
    elif m.verdict == "faster":
        text.append(f"2 processes of {plural(t2, 'thread')} each, all-reduce included, trained more tokens per second "
                    f"than one process of {plural(t1, 'thread')}; these runs do not measure why. {sheet}.")
    elif m.world_size * t2 > cores:
        text.append(f"As the sheet expects ({quoted}): the ranks' {m.world_size * t2} threads outnumber the "
                    f"{plural(cores, 'logical CPU')}, so they cannot all run at once, and the all-reduce comes on top.")
    elif share >= 0.3:
        text.append(f"As the sheet expects ({quoted}) for a tiny model: the all-reduce, waiting included, is a large "
                    "part of a 2-process step, time the single process spends almost none of.")
    else:
        text.append(f"As the sheet expects ({quoted}), though the all-reduce is the smaller part: the rest of a "
                    f"rank's step alone outlasted the single process's whole step, for reasons not measured here.")
    text.append("Notebook 08 measures when each side wins: model size, threads, pinning.")
    return " ".join(text)
