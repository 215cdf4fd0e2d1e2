"""Buckets and overlap: DDP's `bucket_cap_mb` swept on the lab's MiniGPT, from 1 bucket to 18.

    python -m minitrain.measure.buckets [--out DIR] [--quick] [--bench allreduce_bench.json]

The ranks (buckets_ranks.worker) run under the lab's torchrun, loopback only; the driver combines
their notes into buckets.json, buckets.png and one cap's traces (buckets-trace-rank-{r}.json.gz).
What notebook 11 reads from them (tables, checks, sentences) is in buckets_reading.
"""

import shutil
import statistics
import tempfile
from pathlib import Path

from minitrain.artifacts import save_figure
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.allreduce import bench_option, benchmark_fit, predict_allreduce_ms
from minitrain.measure.buckets_ranks import PROGRESS, TRACE_CAP, MiB, Plan, label, worker
from minitrain.measure.buckets_reading import by_cap, fastest, most_buckets, ms_range, rule_table, timing_table
from minitrain.measure.buckets_reading import (  # noqa: F401 (notebook 11 and the tests read them from here)
    bucket_table, checks, equality_table, last_bucket_text, overlap_summary, per_bucket_table, takeaway, what_ran)
from minitrain.measure.measurement import WORLD_SIZE, Measurement, progress, relaunch
from minitrain.measure.trace import load_trace, overlap_table, overlapped_share
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.train import TrainConfig

PLOT_NAME = "buckets.png"
TRACE_NAME = "buckets-trace-rank-{rank}.json.gz"


def bucket_partition(sizes: list[int], first_cap: int, cap: int) -> list[int]:
    """How many tensors each bucket takes when `sizes` (bytes) come in the order their gradients
    are ready: a bucket takes tensors until it holds at least its cap, then closes (DDP's
    compute_bucket_assignment_by_size); a tensor is never split; the last bucket takes the rest."""
    counts, held, limit = [0], 0, first_cap
    for size in sizes:
        counts[-1] += 1
        held += size
        if held >= limit:
            counts.append(0)
            held, limit = 0, cap
    return counts if counts[-1] else counts[:-1]


# ------------------------------------------------------------------------------------------------
# The driver: launch, combine both ranks' notes, write the results


def cap_summary(cap: str, notes: list[dict], overlap_rows: list[dict], fit: dict | None, tokens: int) -> dict:
    """One cap's buckets, step times, all-reduce times, overlap and equality, from both ranks' notes."""
    seen = notes[0]["buckets"][cap]
    hook_buckets = seen["hook"]
    order = [name for b in hook_buckets for name in b["params"]]
    predicted = bucket_partition([seen["sizes"][n] for n in seen["ddp_params_in_order"]],
                                 seen["first_cap_bytes"], seen["cap_bytes"])
    per_rank = [[b for b in n["blocks"] if b["cap"] == cap] for n in notes]
    repeats = []
    for block0, block1 in zip(*per_rank):
        # a step is over when the slower rank is done with it
        step_ms = [max(a, b) for a, b in zip(block0["step_ms"], block1["step_ms"])]
        both = lambda key: statistics.median(block0[key] + block1[key])  # noqa: E731 (steps x ranks)
        repeats.append({"repeat": block0["repeat"], "step_ms": statistics.median(step_ms),
                        "allreduce_ms": both("allreduce_ms"), "after_last_ready_ms": both("after_last_ready_ms")})
    blocks = [b for rank in per_rank for b in rank]
    step = statistics.median([r["step_ms"] for r in repeats])
    per_step: dict[tuple, list[dict]] = {}
    for row in overlap_rows:
        per_step.setdefault((row["rank"], row["step"]), []).append(row)
    return {
        "cap": cap, "first_cap_bytes": seen["first_cap_bytes"], "cap_bytes": seen["cap_bytes"],
        "caps_as_stated": seen["caps_as_stated"],
        "buckets": hook_buckets, "count": len(hook_buckets), "bytes": [b["bytes"] for b in hook_buckets],
        "ddp_agrees": seen["ddp_sizes"] == [b["bytes"] for b in hook_buckets] and seen["ddp_params_in_order"] == order,
        "rule_partition": predicted, "rule_agrees": predicted == [len(b["params"]) for b in hook_buckets],
        "same_buckets_every_block": all(b["same_buckets"] for b in blocks),
        "repeats": repeats, "step_ms": step,
        "step_ms_range": [min(r["step_ms"] for r in repeats), max(r["step_ms"] for r in repeats)],
        "tokens_per_s": tokens / (step / 1e3),
        "allreduce_ms": statistics.median([r["allreduce_ms"] for r in repeats]),
        "after_last_ready_ms": statistics.median([r["after_last_ready_ms"] for r in repeats]),
        "predicted_ms": (sum(predict_allreduce_ms(b["bytes"], fit) for b in hook_buckets)
                         if fit else None),
        "overlap": {"rows": overlap_rows, "overlapped_share": overlapped_share(overlap_rows),
                    "after_backward_ms": statistics.median([max(r["after_backward_ms"] for r in rows)
                                                            for rows in per_step.values()]),
                    "backward_ms": statistics.median([rows[0]["backward_ms"] for rows in per_step.values()]),
                    "threads": len({(r["rank"], r["thread"]) for r in overlap_rows}) // WORLD_SIZE},
        "ranks_equal": all(b["ranks_equal"] for b in blocks),
        "ranks_max_diff": max(b["ranks_max_diff"] for b in blocks),
        "same_as_first_block": all(b["same_as_first_block"] for b in blocks),
        "first_block_max_diff": max(b["first_block_max_diff"] for b in blocks),
    }


def analyse(notes: list[dict], overlap: dict[str, list[dict]], fit: dict | None) -> dict:
    """buckets.json's content (without provenance) from both ranks' notes and each cap's overlap rows."""
    first = notes[0]
    batch, block = TrainConfig.batch_size, TrainConfig.block_size  # DDPRank's defaults: the lab's run
    tokens = batch * block * first["world_size"]
    caps = [cap_summary(label(c), notes, overlap[label(c)], fit, tokens) for c in first["plan"]["caps"]]
    return {
        "config": {"world_size": first["world_size"], "threads_per_rank": first["threads"],
                   "batch_size_per_rank": batch, "block_size": block, "tokens_per_step": tokens,
                   "plan": first["plan"]},
        "gradient_bytes": sum(caps[0]["bytes"]),
        "caps": caps,
        "method": {
            "step_ms": "per block, the median over its timed steps of the slower rank's step time; per cap, "
                       "the median over the repeats' blocks (range: their min and max). Blocks run the caps "
                       "in order, then reversed, repeat after repeat",
            "allreduce_ms": "comm hook, from DDP's call of the hook (the bucket's launch: its gradients are in "
                            "and every earlier bucket has been launched) to its all-reduce done, summed over the "
                            "step's buckets (all-reduces in flight together count each), median over steps and ranks",
            "after_last_ready_ms": "from DDP's call of the hook for the step's last bucket to its last all-reduce "
                                   "done: the communication backward did not hide (median over steps and ranks)",
            "predicted_ms": "the benchmark's alpha-beta fit: buckets x alpha + gradient bytes x beta, "
                            "every all-reduce alone, one after another",
            "overlapped_share": "profiler traces of both ranks: all-reduce time while an autograd node ran, "
                                "over all-reduce time",
            "equality": "after each block both ranks' state dicts compared bitwise (verify.compare_states); "
                        "rank 0's also against the first block's, which trained the same steps on the same batches",
        },
    }


def measure(out: Path, plan: Plan, corpus_dir: Path, echo, bench: Path | None = None) -> dict:
    """Both ranks' blocks and profiles, then buckets.json's content; TRACE_CAP's two traces into `out`.

    `bench`: a benchmark's results file whose alpha-beta fit predicts the all-reduce times."""
    with tempfile.TemporaryDirectory() as tmp, progress(plan.blocks, "blocks") as bar:
        work = Path(tmp)
        notes = relaunch(MEASUREMENT, plan, corpus_dir, work, timeout=900,
                         echo=lambda line: bar.update(1) if line.startswith(PROGRESS) else echo(line))
        overlap = {cap: [row | {"rank": r} for r in range(WORLD_SIZE)
                         for row in overlap_table(load_trace(work / f"trace-{cap}-rank-{r}.json.gz"))]
                   for cap in map(label, plan.caps)}
        traces = [TRACE_NAME.format(rank=r) for r in range(WORLD_SIZE)]
        for r, name in enumerate(traces):  # one cap's traces are kept; the others go with the work folder
            shutil.move(work / f"trace-{label(TRACE_CAP)}-rank-{r}.json.gz", out / name)
    fit, benchmark = benchmark_fit(bench)
    return analyse(notes, overlap, fit) | {
        "traces": {"cap": label(TRACE_CAP), "files": traces,
                   "open_with": "https://ui.perfetto.dev (Open trace file; .json.gz is read as is)"},
        "benchmark": benchmark}


def findings(results: dict) -> list[Finding]:
    """The headline numbers: buckets, the fastest cap against the default, overlap, equality."""
    caps, default = results["caps"], by_cap(results)["default"]
    best, most = fastest(results), most_buckets(results)
    gain = verdict_over_repeats(best["step_ms_range"], default["step_ms_range"], higher_is_faster=False)
    verdict = ("the default is the fastest cap" if best is default else "every repeat faster" if gain == "faster"
               else "within the spread, no clear gain")
    return [
        Finding("buckets_at_default", default["count"], "buckets",
                f"DDP's default caps put MiniGPT's {results['gradient_bytes'] / MiB:.2f} MiB of gradients in this "
                "many buckets"),
        Finding("most_buckets", most["count"], "buckets", f"buckets at the smallest cap swept, {most['cap']} MiB"),
        Finding("default_over_fastest_cap_step", default["step_ms"] / best["step_ms"], "x",
                f"median step at the default caps over that at the fastest cap, {best['cap']} "
                f"({best['count']} bucket(s)); medians of {len(best['repeats'])} alternating repeats; repeats "
                f"{ms_range(best)} against the default's {ms_range(default)}: {verdict}"),
        Finding("step_most_buckets_over_default", most["step_ms"] / default["step_ms"], "ratio",
                f"median step with {most['count']} buckets over the default's 1 bucket"
                if default["count"] == 1 else f"median step with {most['count']} buckets over the default's"),
        Finding("overlapped_share_default", default["overlap"]["overlapped_share"], "fraction of all-reduce time",
                "all-reduce time that ran while backward still computed, default caps (profiler traces)"),
        Finding("overlapped_share_most_buckets", most["overlap"]["overlapped_share"], "fraction of all-reduce time",
                f"the same with {most['count']} buckets ({most['cap']} MiB)"),
        Finding("caps_with_ranks_equal", sum(c["ranks_equal"] for c in caps), f"of {len(caps)} caps",
                "caps after whose every block both ranks held bitwise-equal weights"),
    ]


def plot(results: dict, out: Path) -> None:
    """Step time and communication per cap (unprofiled steps); backward's autograd nodes and the overlapped
    share per cap (profiled steps, drawn apart: the profiler slows them)."""
    import matplotlib.pyplot as plt

    caps = results["caps"]
    x = range(len(caps))
    fig, ((ax1, ax2), (ax3, ax4)) = plt.subplots(2, 2, figsize=(13, 8.5))

    steps = [c["step_ms"] for c in caps]
    low = [c["step_ms"] - c["step_ms_range"][0] for c in caps]
    high = [c["step_ms_range"][1] - c["step_ms"] for c in caps]
    ax1.errorbar(x, steps, yerr=[low, high], fmt="o-", color="#c44e52", capsize=4,
                 label="median step, slower rank (bars: min-max of the repeats)")
    ax1.set_ylim(0, 1.2 * max(c["step_ms_range"][1] for c in caps))
    ax1.set_ylabel("ms per step")
    ax1.set_title("Step time (unprofiled steps)")
    ax1.legend(fontsize=8, loc="lower left")

    ax2.plot(x, [c["allreduce_ms"] for c in caps], "o-", color="#8172b2",
             label="all-reduces in the step, summed (comm hook)")
    ax2.plot(x, [c["after_last_ready_ms"] for c in caps], "s-", color="#dd8452",
             label="after the last bucket was ready (not hidden)")
    ax2.set_yscale("log")  # the summed in-flight times dwarf the rest
    ax2.set_ylabel("ms per step (medians, log scale)")
    ax2.set_title("Communication (unprofiled steps)")
    ax2.legend(fontsize=8, loc="upper left")

    ax3.plot(x, [c["overlap"]["backward_ms"] for c in caps], "s-", color="0.4")
    ax3.set_ylim(0, 1.2 * max(c["overlap"]["backward_ms"] for c in caps))
    ax3.set_ylabel("ms per step (median)")
    ax3.set_title("Backward's autograd nodes, DDP's hooks included (profiled steps)")

    # one bucket: what the trace counts ran inside backward's last node, which calls the hook; not overlap
    many = [i for i, c in enumerate(caps) if c["count"] > 1]
    bars = ax4.bar(many, [100 * caps[i]["overlap"]["overlapped_share"] for i in many], color="#55a868")
    ax4.bar_label(bars, fmt="%.0f%%")
    for i, c in enumerate(caps):
        if c["count"] == 1:
            ax4.text(i, 2, "1 bucket:\nnothing to\noverlap", ha="center", va="bottom", fontsize=7, color="0.4")
    ax4.set_ylim(0, 110)
    ax4.set_ylabel("% of all-reduce time")
    ax4.set_title("All-reduce running while backward computes (profiled steps)")

    for ax in (ax1, ax2, ax3, ax4):
        ax.set_xticks(list(x), [f"{c['cap']}\n({c['count']})" for c in caps], fontsize=8)
        ax.set_xlabel("bucket_cap_mb in MiB (default: 1 MiB first bucket, 25 MiB after), and (buckets)", fontsize=8)
    config, prov = results["config"], results["provenance"]
    fig.suptitle(f"Buckets and overlap: MiniGPT's {results['gradient_bytes'] / MiB:.2f} MiB of gradients, "
                 f"{config['world_size']} gloo ranks x {plural(config['threads_per_rank'], 'thread')}, {prov.cores} "
                 f"logical CPUs, torch {prov.torch}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


def report(results: dict) -> str:
    """What `python -m` prints: DDP's buckets per cap and the step times."""
    return rule_table(results) + "\n" + timing_table(results)


MEASUREMENT = Measurement("buckets", "Buckets and overlap: DDP's bucket_cap_mb swept, step time and overlap",
                          "11-buckets-and-overlap.ipynb", (PLOT_NAME,), measure, findings, plot, report,
                          Plan.quick.__doc__, Plan, worker, options=bench_option,
                          written=lambda results: results["traces"]["files"])
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
