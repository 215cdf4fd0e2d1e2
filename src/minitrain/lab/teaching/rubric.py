"""The teacher's rubric for the Block G paragraph (solutions/rubric-paragraph.md), written from a manifest: every
number derived from it, every data-dependent phrase chosen by a rule that leaves out what it cannot vouch for."""

import textwrap
from dataclasses import dataclass

from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.report import plural
from minitrain.paths import EXPERIMENT_DIR, REPO

RUBRIC = REPO / "solutions" / "rubric-paragraph.md"
MANIFEST = EXPERIMENT_DIR / "manifest.json"
HIDDEN_BELOW = 0.25  # "DDP hides the all-reduce behind backward" is false while less of it than this overlaps
NOT_2X_BELOW = 1.8  # a free all-reduce giving less than this refutes "NCCL would make 2 processes twice as fast"
CLAIMED = {"faster": "2 processes were faster", "slower": "2 processes were slower",
           "no clear winner": "there is no clear winner"}  # a verdict as a paragraph states it


@dataclass(frozen=True)
class Facts:
    """The figures the rubric derives from a manifest, and what its rules chose from them."""

    step_ratio: float  # a 2-process step over a 1-process step
    forward_ratio: float  # a rank's forward over the single process's
    backward_ratio: float
    fb_share: float  # forward + backward over a 2-process step
    steps: dict[int, list[float]]  # process count -> the repeats' median steps, ms
    free_step: float  # a 2-process step with a free all-reduce, ms
    free_ratio: float  # 2 vs 1 process with that step
    overlap: float | None  # overlapped_share_default of the buckets measurement, when measured
    not_hidden: str | None  # why "DDP hides the all-reduce" is false here; None when nothing shows it


def facts(m: Manifest) -> Facts:
    """The derived figures and the rules' choices for `m`."""
    one, two = m.step_breakdown_ms["1proc"], m.step_breakdown_ms["2proc"]
    steps = {n: [r["step_p50_ms"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    free_step = m.step_p50_ms_2proc * (1 - m.allreduce_share_of_step)
    found = m.beyond_findings.get("buckets", {}).get("findings", [])
    overlap = next((f["value"] for f in found if f["name"] == "overlapped_share_default"), None)
    said = [] if overlap is None else [f"{overlap:.3f} of its time overlapped backward (`buckets`)"]
    if len(m.buckets) == 1:
        said.insert(0, "with one bucket, the all-reduce starts when backward has produced the last gradient")
    not_hidden = "; ".join(said) if said and (overlap is None or overlap < HIDDEN_BELOW) else None
    return Facts(step_ratio=m.step_p50_ms_2proc / m.step_p50_ms_1proc,
                 forward_ratio=two["forward"] / one["forward"], backward_ratio=two["backward"] / one["backward"],
                 fb_share=(two["forward"] + two["backward"]) / m.step_p50_ms_2proc,
                 steps=steps,
                 free_step=free_step, free_ratio=2 * m.step_p50_ms_1proc / free_step,
                 overlap=overlap, not_hidden=not_hidden)


def wrap(text: str, indent: str = "") -> str:
    """A paragraph or list item of prose, wrapped at 100 columns."""
    return textwrap.fill(text, 100, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def ms_range(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def buckets(m: Manifest) -> str:
    return "one bucket" if len(m.buckets) == 1 else f"{len(m.buckets)} buckets"


def at_end(m: Manifest, f: Facts) -> bool:
    """One bucket, and no measurement showing its all-reduce overlapping backward: it runs at backward's end."""
    return len(m.buckets) == 1 and f.not_hidden is not None


def figures(m: Manifest, f: Facts) -> list[str]:
    """The table of manifest fields, then the figures derived from them."""
    (lo, hi), one, two = m.speedup_2proc_range, m.step_breakdown_ms["1proc"], m.step_breakdown_ms["2proc"]
    torchrun = (" (torchrun sets `OMP_NUM_THREADS=1` when it starts more than 1 process and the variable is unset)"
                if m.threads_per_rank["2proc"] == 1 else "")
    verdict = {"no clear winner": "the repeats' tokens/s ranges overlap",
               "faster": "every 2-process repeat's tokens/s above every 1-process one's",
               "slower": "every 2-process repeat's tokens/s below every 1-process one's"}[m.verdict]
    rows = [
        ("tokens_per_sec_1proc", f"{m.tokens_per_sec_1proc:,.0f}", "tokens/s of 1 process (median repeat)"),
        ("tokens_per_sec_2proc", f"{m.tokens_per_sec_2proc:,.0f}", "tokens/s of 2 processes (median repeat)"),
        ("speedup_2proc", f"{m.speedup_2proc:.2f}", "2 vs 1 process, x: the median repeats' tokens/s ratio"),
        ("speedup_2proc_range", f"{lo:.2f} - {hi:.2f}", f"the {m.repeats['count']} alternating repeats' ratios, x "
         f"(their median: {m.paired_speedup():.2f})"),
        ("verdict", m.verdict, verdict),
        ("repeats.count", str(m.repeats["count"]), "alternating repeats of each process count"),
        ("step_p50_ms_1proc", f"{m.step_p50_ms_1proc:.1f}", "ms, median step of 1 process"),
        ("step_p50_ms_2proc", f"{m.step_p50_ms_2proc:.1f}", "ms, median step of 2 processes"),
        ("allreduce_share_of_step", f"{m.allreduce_share_of_step:.3f}",
         "the comm hook's all-reduce (waiting included) over a 2-process step"),
        ("step_breakdown_ms.1proc.forward", f"{one['forward']:.1f}", "ms"),
        ("step_breakdown_ms.1proc.backward", f"{one['backward']:.1f}", "ms, without the all-reduce"),
        ("step_breakdown_ms.2proc.forward", f"{two['forward']:.1f}", "ms"),
        ("step_breakdown_ms.2proc.backward", f"{two['backward']:.1f}", "ms, without the all-reduce"),
        ("step_breakdown_ms.2proc.all-reduce", f"{two['all-reduce']:.1f}", "ms"),
        ("gradient_bytes", f"{m.gradient_bytes:,}",
         f"bytes of gradients all-reduced per step ({m.gradient_bytes / 1e6:.2f} MB)"),
        ("threads_per_rank.1proc", str(m.threads_per_rank["1proc"]), "threads of the single process"),
        ("threads_per_rank.2proc", str(m.threads_per_rank["2proc"]), f"threads of each rank{torchrun}"),
        ("cores", str(m.cores), "logical CPUs"),
        ("batch_size_per_rank", str(m.batch_size_per_rank), "sequences per rank per step"),
        ("block_size", str(m.block_size), "tokens per sequence"),
        ("model_params", f"{m.model_params:,}", "parameters of MiniGPT"),
        ("bitwise_equal", str(m.bitwise_equal).lower(), "the two ranks' final weights"),
    ]
    if f.overlap is not None:
        rows.append(("beyond_findings.buckets.findings.overlapped_share_default", f"{f.overlap:.3f}",
                     "share of all-reduce time that ran while backward still computed, default bucket caps "
                     f"(measured {m.beyond_findings['buckets']['date'][:10]})"))
    table = ["| manifest field | value | what it is |", "|---|---|---|"]
    table += [f"| `{name}` | {value} | {meaning} |" for name, value, meaning in rows]
    ms1, ms2 = m.step_p50_ms_1proc, m.step_p50_ms_2proc
    median = m.repeats["median_run_ids"]
    return ["## The figures (from the committed manifest)", wrap(
        f"Every number in this rubric comes from `experiments/35-ddp-cpu/manifest.json` as committed: the sheet's "
        f"runs `{m.run_ids['1proc']}` (1 process) and `{m.run_ids['2proc']}` (2 processes), the median repeats "
        f"`{median['1proc']}` and `{median['2proc']}`, dated {m.date[:10]}. A learner's own run gives other numbers: "
        "grade their paragraph against their own manifest, with the same criteria."), "\n".join(table), wrap(
        f"Derived from them: a 2-process step took {ms2:.1f} / {ms1:.1f} = {f.step_ratio:.2f}x the 1-process step; a "
        f"rank's forward took {two['forward']:.1f} / {one['forward']:.1f} = {f.forward_ratio:.1f}x the single "
        f"process's and its backward {two['backward']:.1f} / {one['backward']:.1f} = {f.backward_ratio:.1f}x; forward "
        f"and backward are ({two['forward']:.1f} + {two['backward']:.1f}) / {ms2:.1f} = {f.fb_share:.0%} of a "
        f"2-process step. The `buckets` list holds {buckets(m)}. The 1-process repeats' median steps ranged "
        f"{ms_range(f.steps[1])} ms, the 2-process ones {ms_range(f.steps[2])} ms (`repeats.1proc[].step_p50_ms`, "
        "`repeats.2proc[].step_p50_ms`).")]


def nccl(m: Manifest, f: Facts, cause: str, arithmetic: str) -> str:
    """`cause`, then `arithmetic` ({share}, {ratio}) when a free all-reduce would still fall short of 2x."""
    if f.free_ratio >= NOT_2X_BELOW:
        return cause + "."
    return cause + arithmetic.format(share=f"{100 * m.allreduce_share_of_step:.1f}%", ratio=f"{f.free_ratio:.2f}x")


def criteria(m: Manifest, f: Facts) -> list[str]:
    """The ten points' criteria, one for each thing notebook 06's Block G asks for, then the causes the
    manifest shows false."""
    share, t1, t2, cores = m.allreduce_share_of_step, m.threads_per_rank["1proc"], m.threads_per_rank["2proc"], m.cores
    (lo, hi), tps = m.speedup_2proc_range, {n: [r["tokens_per_sec"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    ranges = (f"1 process {min(tps[1]):,.0f}-{max(tps[1]):,.0f} tokens/s, 2 processes "
              f"{min(tps[2]):,.0f}-{max(tps[2]):,.0f}")
    verdict = (f"The repeats' tokens/s overlap ({ranges}), so no clear winner" if m.verdict == "no clear winner" else
               f"Every 2-process repeat ran {'more' if m.verdict == 'faster' else 'fewer'} tokens/s than every "
               f"1-process one ({ranges}), so {CLAIMED[m.verdict]}")
    items = [
        f"1. **The figures** (2). The tokens/s of 1 process ({m.tokens_per_sec_1proc:,.0f}) and of 2 "
        f"({m.tokens_per_sec_2proc:,.0f}), the 2-vs-1 ratio (the repeats' median {m.paired_speedup():.2f}x; "
        f"speedup_2proc's {m.speedup_2proc:.2f}x counts too) and its range over the repeats "
        f"({lo:.2f}-{hi:.2f}x), the all-reduce's share of a 2-process step ({share:.0%}), rounded as written. Stop "
        "condition 4 checks them: a paragraph that passes it has these 2 points.",
        f"2. **The verdict** (2). {verdict}. (1 point for the verdict, 1 for its reason: the repeats' tokens/s lie "
        "apart or overlap.)",
        f"3. **The per-rank step** (2). Each rank trains on a whole batch of its own ({m.batch_size_per_rank} x "
        f"{m.block_size} tokens), the same as the single process, so 2 processes do twice the tokens per step and win "
        f"only while their step takes less than twice the 1-process step; here it took {f.step_ratio:.2f}x. (1 point "
        f"for the twice-the-work comparison, 1 for the break-even at 2x with the measured {f.step_ratio:.2f}x.)",
        f"4. **The threads** (2). Both runs use the same {plural(cores, 'logical CPU')}: 1 process with "
        f"{plural(t1, 'thread')} against 2 processes with {plural(t2, 'thread')} each. A paragraph saying 2 "
        f"processes had more hardware, or {'one CPU each' if cores == 2 else 'CPUs of their own'} as a fact (nothing "
        "pins a rank to a CPU), loses these points.",
        f"5. **The all-reduce** (1). Its share, {share:.0%} of a 2-process step in the median repeat"
        + (f" ({100 * min(shares):.0f}-{100 * max(shares):.0f}% over the repeats)" if (shares := m.allreduce_shares()) else "")
        + f", waiting for the other rank included: {'a part of the cost, not most of it' if share < 0.5 else 'most of the cost'}. A paragraph that "
        "makes it weigh more or less than that loses the point.",
        "6. **No cause beyond the measurements** (1). Causes only from what was measured (the threads, the per-rank "
        "step, the all-reduce); none of the claims below, nor another that the manifest contradicts, nor an "
        "unmeasured cause stated as fact (of the spread, or of why a rank's step is longer). A false cause also costs "
        "the point of the criterion it contradicts.",
    ]
    false = [nccl(m, f, '"NCCL (or a faster backend) would make 2 processes about twice as fast": NCCL is for CUDA '
                        'tensors, not CPU ones',
                  f"; and the all-reduce is {{share}} of the step, so even a free one would make a 2-process step "
                  f"{m.step_p50_ms_2proc:.1f} x (1 - {share:.3f}) = {f.free_step:.1f} ms: 2 x "
                  f"{m.step_p50_ms_1proc:.1f} / {f.free_step:.1f} = {{ratio}}, not 2x.")]
    if share < 0.5:
        fb = f"; forward and backward are {f.fb_share:.0%}" if f.fb_share > share else ""
        false.append(f'"The all-reduce (communication) dominates": it is {share:.0%} of the step{fb}.')
    if f.not_hidden:
        false.append(f'"DDP hides the all-reduce behind backward": {f.not_hidden}.')
    false.append(f'"Each process does half the batch": each rank does a whole {m.batch_size_per_rank} x '
                 f"{m.block_size} batch; the global batch doubles (weak scaling).")
    if m.bitwise_equal:
        false.append('"The ranks\' weights drift apart, so they do extra work": they end bitwise equal.')
    if m.verdict == "faster" and t1 > 1:
        false.append(f'"The 2 processes used both CPUs, the single process only one": the single process ran '
                     f"{plural(t1, 'thread')} on the same {plural(cores, 'logical CPU')} (`threads_per_rank`); the "
                     "gain is processes against threads, not more hardware.")
    return ["## Criteria (10 points)", "\n".join(wrap(item, "   ") for item in items),
            "Causes that are false here (and why, from the manifest):\n"
            + "\n".join(wrap(f"- {cause}", "  ") for cause in false)]


def answers(m: Manifest, f: Facts) -> list[str]:
    """Three graded answers: A meets every criterion, B states a false cause, C fails stop condition 4."""
    (lo, hi), share, cores = m.speedup_2proc_range, m.allreduce_share_of_step, m.cores
    t1, t2 = m.threads_per_rank["1proc"], m.threads_per_rank["2proc"]
    tps1, tps2, ratio = f"{m.tokens_per_sec_1proc:,.0f}", f"{m.tokens_per_sec_2proc:,.0f}", f"{f.step_ratio:.2f}x"
    mb = f"{m.gradient_bytes / 1e6:.2f} MB"
    hook = (f"of the one {mb} gradient bucket, launched from DDP's hook at the end of backward" if at_end(m, f)
            else f"of the {mb} of gradients in {buckets(m)}, launched from DDP's hook during backward")
    read = {"faster": "every 2-process repeat above every 1-process one in tokens/s",
            "slower": "every 2-process repeat below every 1-process one in tokens/s",
            "no clear winner": "the repeats' tokens/s overlap"}[m.verdict]
    part = "a part of the cost, not most of it" if share < 0.5 else "most of the cost"
    a = (f"Each of the 2 processes trains on a whole {m.batch_size_per_rank} x {m.block_size} token batch, so 2 "
         "processes do twice the tokens of 1 per step and come out ahead only if their step takes less than twice as "
         f"long; in the median repeats it took {ratio}, and they reached {tps2} tokens/s against {tps1} for 1 process. "
         f"Repeat by repeat, 2 processes ran {m.paired_speedup():.2f}x the tokens/s of 1 at the median, range "
         f"{lo:.2f}-{hi:.2f}x, {read}, so {CLAIMED[m.verdict]}. Both runs share the "
         f"same {plural(cores, 'logical CPU')}: 1 process with {plural(t1, 'thread')}, or 2 processes with "
         f"{plural(t2, 'thread')} each. The gloo all-reduce {hook}, took {share:.0%} of a 2-process step, waiting for "
         f"the other rank included: {part}. These runs do not measure why a rank's step took {ratio} the single "
         "process's.")
    verdict = m.verdict if m.verdict == "no clear winner" else f"2 processes {m.verdict}"
    a_grade = (f"Passes stop condition 4. Criteria 1-6 all met: the figures (2), {verdict} read from the repeats' "
               f"tokens/s (2), the twice-the-work comparison with {ratio} (2), the same {plural(cores, 'CPU')} as "
               f"threads against processes (2), the all-reduce's {share:.0%} weighed as {part} (1), no cause beyond "
               "the measurements (1).")
    b = (f"2 processes trained at {tps2} tokens/s against {tps1} for 1 process (median repeats); the repeats' ratios had a median of "
         f"{m.paired_speedup():.2f}x, from {lo:.2f}x to {hi:.2f}x, so {CLAIMED[m.verdict]}. Each rank trains on a full {m.batch_size_per_rank} x "
         f"{m.block_size} batch, so 2 processes do twice the work per step, but in the median repeats a 2-process step took {ratio} as long. "
         f"The 1-process run used {plural(t1, 'thread')} and each rank {t2}, on the same "
         f"{plural(cores, 'logical CPU')}. The all-reduce took {share:.0%} of a 2-process step. What holds 2 processes "
         "back is gloo, a slow backend: switching to NCCL would make 2 processes twice as fast.")
    weighed = f.free_ratio >= NOT_2X_BELOW  # else "twice as fast" contradicts the all-reduce's measured share
    b_score = 7 + weighed
    b_grade = (f"Passes stop condition 4: every number is right. Criterion 1: 2. Criterion 2: 1 (the verdict is "
               "right, but read from the ratios' range, not from the repeats' tokens/s). Criterion 3: 2. Criterion 4: "
               f"2. Criterion 5: {int(weighed)} (the {share:.0%} is right"
               + ("" if weighed else ", and the last sentence contradicts its weight") + "). Criterion 6: 0: "
               + nccl(m, f, "NCCL does not run on CPU tensors", ", and with the all-reduce at {share} of the step a "
                      "free one would give {ratio}, not 2x."))
    # C claims a verdict the repeats contradict: the median's side when they overlap, else that they overlap
    wrong = ("faster" if m.speedup_2proc >= 1 else "slower") if m.verdict == "no clear winner" else "no clear winner"
    said = f"not clearly {m.verdict}" if wrong == "no clear winner" else wrong
    c = (f"Two processes were {said}: {tps2} against {tps1} tokens/s, {m.speedup_2proc:.2f}x, "
         f"{'because' if wrong == 'faster' else 'though'} each process only does half of the batch, and DDP hides the "
         "all-reduce behind the backward pass, so communication costs nothing.")
    evidence = (f"{f.overlap:.3f} of it overlapped backward" if f.overlap is not None else "one bucket, at the end of "
                "backward") if f.not_hidden else None
    free = (f"neither hidden ({evidence}) nor free" if evidence else "not free") + f" ({share:.0%} of the step)"
    given = m.verdict if m.verdict == "no clear winner" else f'"{m.verdict}"'
    c_grade = (f'Fails stop condition 4: it states the verdict "{wrong}" where the repeats give {given}, and leaves '
               "out the repeats' range and the all-reduce's share (criterion 1). At most 4 points, and it earns none: "
               "the wrong verdict (criterion 2); each rank does a whole batch, not half (criterion 3); nothing on "
               f"threads and processes (criterion 4); the all-reduce is {free} (criteria 5 and 6).")
    return ["## Three graded answers",
            "### Answer A: 10 of 10", f"> {a}", wrap(a_grade),
            f"### Answer B: {b_score} of 10 (a false cause)", f"> {b}", wrap(b_grade),
            "### Answer C: 0 of 10 (fails)", f"> {c}", wrap(c_grade)]


INTRO = [
    "# Rubric: Block G's paragraph (1 process against 2, and why)",
    wrap("Stop condition 4 (`python -m minitrain.lab.check`, `minitrain.lab.reporting.paragraph`) already checks what a "
         "program can: the paragraph states the manifest's tokens/s of 1 and of 2 processes, the median 2-vs-1 ratio "
         "and the repeats' range, the all-reduce's share of a 2-process step, the verdict the repeats give (and no "
         "other one), and is at most 180 words. It cannot tell a true cause from a false one: the reference paragraph "
         'with "Switching to NCCL would make 2 processes twice as fast." appended passes it. This rubric grades the '
         "rest, by a person reading the paragraph next to the manifest."),
    "A paragraph that fails stop condition 4 gets at most 4 of the 10 points.",
]


def rubric_text(m: Manifest) -> str:
    """solutions/rubric-paragraph.md, written from the manifest `m`."""
    f = facts(m)
    return "\n\n".join(INTRO + figures(m, f) + criteria(m, f) + answers(m, f)) + "\n"
