"""Small helpers the notebooks call, so that cells hold prose and calls, not logic."""

import os
import statistics
from pathlib import Path

from minitrain.lab.reporting.disturbance import disturbance_note, twice_checked
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.report import set_lesson_notes
from minitrain.lab.reporting.stop_conditions import check_lesson_notes, run_check
from minitrain.lab.todos import blank
from minitrain.timing import VARIANTS, summarize


def format_rows(rows: list[tuple], headers: tuple[str, ...] | None = None) -> str:
    """A plain-text table with left-aligned columns."""
    rows = [tuple(str(c) for c in r) for r in rows]
    if headers:
        rows = [tuple(headers)] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if headers:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def timing_table(timings: list[dict], warmup: int) -> str:
    """Each timing variant over the steps after the warm-up: mean, median, p95 in ms."""
    measured = timings[warmup:]
    rows = []
    for variant in VARIANTS:
        values = [r[variant.field] for r in measured if r.get(variant.field) is not None]
        if values:
            s = summarize(values)
            rows.append((variant.label, f"{s['mean']:.2f}", f"{s['median']:.2f}", f"{s['p95']:.2f}"))
    step = summarize([r["step_ms"] for r in measured])
    rows.append(("whole step (for scale)", f"{step['mean']:.2f}", f"{step['median']:.2f}", f"{step['p95']:.2f}"))
    return (f"over steps {warmup}..{len(timings) - 1} ({len(measured)} steps), in ms\n"
            + format_rows(rows, headers=("variant", "mean", "median", "p95 (nearest rank)")))


def plot_timing_variants(timings: list[dict], warmup: int):
    """Each timing variant per step (left) and its distribution after the warm-up (right)."""
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in timings]
    colors = ("#4c72b0", "#c44e52", "#55a868", "#8172b2")
    shown = [(v, c) for v, c in zip(VARIANTS, colors) if all(r.get(v.field) is not None for r in timings)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.8))
    for variant, color in shown:
        ax1.plot(steps, [r[variant.field] for r in timings], label=variant.label, color=color)
    ax1.axvspan(0, warmup - 0.5, color="0.9", label=f"warm-up (first {warmup} steps, not summarized)")
    ax1.set_xlabel("step")
    ax1.set_ylabel("ms")
    ax1.set_yscale("log")
    ax1.set_title("Per step")
    # below the axes: inside, the legend hid variant B's lowest steps
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    for variant, color in shown:
        measured = [r[variant.field] for r in timings[warmup:]]
        ax2.hist(measured, bins=20, alpha=0.7, color=color,
                 label=f"{variant.key} (median {statistics.median(measured):.2f} ms)")
    ax2.set_xlabel("ms")
    ax2.set_ylabel("steps")
    ax2.set_title(f"Distribution over the last {len(timings) - warmup} steps")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig




MEASURED = ("run_ids", "tokens_per_sec_1proc", "tokens_per_sec_2proc", "speedup_2proc", "speedup_2proc_range",
            "verdict", "step_p50_ms_1proc", "step_p50_ms_2proc", "allreduce_share_of_step", "allreduce_p50_ms",
            "allreduce_p95_ms", "backward_allreduce_p50_ms", "threads_per_rank", "cores", "cpu_model", "sitting", "date")


def manifest_figures(manifest: Manifest) -> str:
    """The manifest's measured figures, one a line (they differ from machine to machine), and under the median
    repeats' steps their ratio, the per-rank step's 2 processes against 1."""
    def shown(value: object) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}"
        if isinstance(value, list):
            return " - ".join(shown(v) for v in value)
        return str(value)

    repeats, sheet = manifest.repeats["median_run_ids"], manifest.run_ids
    source = {"speedup_2proc": "the median repeats' tokens/s ratio, not the repeats' median ratio",
              "tokens_per_sec_1proc": f"median repeat {repeats['1proc']}, hook only",
              "tokens_per_sec_2proc": f"median repeat {repeats['2proc']}, hook only",
              "step_p50_ms_1proc": f"median repeat {repeats['1proc']}", "step_p50_ms_2proc": f"median repeat {repeats['2proc']}",
              "allreduce_share_of_step": f"median repeat {repeats['2proc']}, hook only; every repeat's in the table below",
              **{key: f"the sheet's run {sheet['2proc']}, timed both ways" for key in
                 ("allreduce_p50_ms", "allreduce_p95_ms", "backward_allreduce_p50_ms")}}  # p95: nearest rank
    lines = [f"{key}: {shown(getattr(manifest, key))}" + (f"  ({source[key]})" if key in source else "") for key in MEASURED]
    lines.insert(MEASURED.index("step_p50_ms_2proc") + 1, f"  per-rank step, 2 processes over 1: {manifest.step_p50_ms_2proc / manifest.step_p50_ms_1proc:.2f}x "
                 "(step_p50_ms_2proc / step_p50_ms_1proc, the median repeats'; 2 processes win below 2x; 2 over it is "
                 f"their speedup_2proc, {manifest.speedup_2proc:.2f}x)")
    lines.insert(MEASURED.index("speedup_2proc_range") + 1, f"  the repeats' own ratios: median {manifest.paired_speedup():.2f}x, "
                 f"range {manifest.speedup_2proc_range[0]:.2f}-{manifest.speedup_2proc_range[1]:.2f}x "
                 "(speedup_2proc_range is their range)")
    return "\n".join(lines)


def two_against_one(manifest: Manifest) -> str:
    """2 processes against 1 as one statistic with its range: the repeats' paired ratios' median, then the verdict."""
    lo, hi = manifest.speedup_2proc_range
    return (f"2 processes ran {manifest.paired_speedup():.2f}x the tokens/s of 1 (median of the "
            f"{manifest.repeats['count']} repeats' ratios; range {lo:.2f}-{hi:.2f}x): {manifest.verdict}")


def repeats_table(manifest: Manifest) -> str:
    """Each repeat of the 1-vs-2 comparison: run ids, tokens/s, the 2-vs-1 ratio and (when the manifest holds
    it) the all-reduce's share of a 2-process step, in run order."""
    reps, shares = manifest.repeats, manifest.allreduce_shares()
    rows = [(i + 1, a["run_id"], f"{a['tokens_per_sec']:,.0f}", b["run_id"], f"{b['tokens_per_sec']:,.0f}",
             f"{ratio:.2f}x") + ((f"{100 * shares[i]:.1f}%",) if shares else ())
            for i, (a, b, ratio) in enumerate(zip(reps["1proc"], reps["2proc"], reps["speedups"]))]
    return format_rows(rows, headers=("repeat", "1-process run", "tokens/s", "2-process run", "tokens/s", "2 vs 1")
                       + (("all-reduce share",) if shares else ()))


def disturbance_warning(manifest: Manifest) -> str:
    """Whether the repeats look disturbed by other programs (the manifest's `disturbed`), and what to do then."""
    if not manifest.disturbed:
        t1, t2 = manifest.threads_per_rank["1proc"], manifest.threads_per_rank["2proc"]
        twice = ("2 processes stayed within twice one process" if twice_checked(t1, t2) else
                 f"2 processes against twice one process not checked (the single process had {t1} threads, more "
                 f"than the two ranks' {2 * t2} together)")
        return (f"quiet machine: no repeat is under half the fastest of its configuration, and {twice}: nothing "
                "marks these repeats as disturbed")
    return (f"WARNING, {disturbance_note(manifest.disturbed)}\nThe verdict above still reads these repeats as they "
            "are; after re-measuring, write your paragraph from the new manifest.")


def a_against_b(timings: list[dict], warmup: int) -> str:
    """Variant A against variant B and the whole step, medians over the steps after the warm-up."""
    medians = {key: statistics.median(r[key] for r in timings[warmup:])
               for key in ("backward_allreduce_ms", "allreduce_ms", "step_ms")}
    a, b, step = medians["backward_allreduce_ms"], medians["allreduce_ms"], medians["step_ms"]
    return (f"median A {a:.2f} ms, median B {b:.2f} ms: B is {b / a:.0%} of A\n"
            f"B, the all-reduce from launch to completion (waiting included), is {b / step:.0%} of a "
            f"{step:.1f} ms step")


def run_parameters_problem(nproc: object, steps: object, warmup: object, out_dir: object,
                           timeout_s: object) -> str | None:
    """What is wrong with run.ipynb's papermill parameters, in one line naming the parameter and
    the fix; None when they are fine. The rules are train.py's and the launcher's."""
    def whole(value: object, least: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= least

    if not whole(nproc, 1):
        return f"nproc = {nproc!r} is not a whole number of at least 1: use 1 or 2 (papermill: -p nproc 2)"
    if not whole(steps, 1):
        return f"steps = {steps!r} is not a whole number of at least 1 (papermill: -p steps 100)"
    if not whole(warmup, 0):
        return f"warmup = {warmup!r} is not a whole number of at least 0 (papermill: -p warmup 50)"
    if steps <= warmup:
        return (f"steps ({steps}) must be larger than warmup ({warmup}): the summary uses the steps after "
                "the warm-up (papermill: -p steps 100 -p warmup 50)")
    if not isinstance(out_dir, str):
        return f"out_dir = {out_dir!r} is not a folder name: use a string, \"\" for the lab's output folder"
    if out_dir and os.path.exists(out_dir) and not os.path.isdir(out_dir):
        return f"out_dir = {out_dir!r} is a file, not a folder: choose a folder (it is created if missing)"
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        return f"timeout_s = {timeout_s!r} is not a number of seconds above 0 (papermill: -p timeout_s 600)"
    return None


def your_paragraph(out: Path, text: str) -> str:
    """Block G: `text` becomes the manifest's lesson_notes in `out`; what stop condition 4 says of it."""
    if not isinstance(text, str) or not text.strip():
        return blank.said('write your paragraph as my_paragraph = """...""" in the cell above')
    set_lesson_notes(out, text.strip())
    result = run_check("4. your paragraph", lambda: check_lesson_notes(out))
    return f"stop condition 4: {result.status}: {result.detail}"

