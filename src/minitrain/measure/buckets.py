"""Buckets and overlap: DDP's `bucket_cap_mb` swept on the lab's MiniGPT, from 1 bucket to 18.

    python -m minitrain.measure.buckets [--out DIR] [--quick] [--bench allreduce_bench.json]

The ranks (buckets_ranks.worker) run under the lab's torchrun, loopback only; the driver combines
their notes into buckets.json, buckets.png and one cap's traces (buckets-trace-rank-{r}.json.gz).
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


def by_cap(results: dict) -> dict[str, dict]:
    return {c["cap"]: c for c in results["caps"]}


def fastest(results: dict) -> dict:
    """The cap with the shortest median step."""
    return min(results["caps"], key=lambda c: c["step_ms"])


def most_buckets(results: dict) -> dict:
    """The cap with the most buckets (the smallest such cap, the last in the plan's order)."""
    return max(reversed(results["caps"]), key=lambda c: c["count"])


def ms_range(c: dict) -> str:
    """A cap's repeat range: 'min-max ms' of its block medians."""
    return f"{c['step_ms_range'][0]:.1f}-{c['step_ms_range'][1]:.1f} ms"


def and_list(items: list[str]) -> str:  # 'a, b and c'
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


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


# ------------------------------------------------------------------------------------------------
# What the notebook shows


def what_ran(results: dict) -> str:
    """The ranks, threads and plan of the run, for its provenance line."""
    config, plan = results["config"], results["config"]["plan"]
    return (f"{config['world_size']} ranks x {plural(config['threads_per_rank'], 'thread')}; {len(plan['caps'])} caps x "
            f"{plan['repeats']} repeats of {plan['warmup']} + {plan['measured']} steps, {plan['profiled']} "
            f"profiled steps per cap")


def rule_table(results: dict) -> str:
    """Per cap: DDP's caps in bytes, the buckets it made, and whether the closing rule predicts them."""
    lines = [f"{'bucket_cap_mb':>13} {'first cap B':>11} {'cap B':>10} {'buckets':>7}  bucket bytes, in launch order"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>13} {c['first_cap_bytes']:>11,} {c['cap_bytes']:>10,} {c['count']:>7}  "
                     + " ".join(f"{b:,}" for b in c["bytes"]))
    caps = results["caps"]
    lines.append(f"caps as stated: {all(c['caps_as_stated'] for c in caps)}; rule predicts the buckets: "
                 f"{all(c['rule_agrees'] for c in caps)}; DDP's record agrees: {all(c['ddp_agrees'] for c in caps)}; "
                 f"same buckets every block: {all(c['same_buckets_every_block'] for c in caps)}")
    return "\n".join(lines)


def checks(results: dict) -> dict[str, bool]:
    """The facts a run must show on any machine (a live run asserts each holds: show_checks)."""
    caps = results["caps"]
    return {"DDP set the caps as ddp_caps states them": all(c["caps_as_stated"] for c in caps),
            "the closing rule predicts every cap's buckets": all(c["rule_agrees"] for c in caps),
            "DDP's own record agrees with the comm hook": all(c["ddp_agrees"] for c in caps),
            "the default caps make 1 bucket of MiniGPT's gradients": by_cap(results)["default"]["count"] == 1,
            "both ranks bitwise equal after every block, every cap": all(c["ranks_equal"] for c in caps)}


def bucket_table(results: dict, cap: str = label(TRACE_CAP)) -> str:
    """One cap's buckets in launch order: bytes, and their tensors in the order backward filled them."""
    lines = [f"bucket_cap_mb={cap}", f"{'bucket':>6}  {'bytes':>9}  {'tensors':>7}  tensors, first to last to arrive"]
    lines += [f"{b['index']:>6}  {b['bytes']:>9,}  {len(b['params']):>7}  " + ", ".join(b["params"])
              for b in by_cap(results)[cap]["buckets"]]
    return "\n".join(lines)


def last_bucket_text(results: dict) -> str:
    """Which tensor completes the last bucket, over every cap swept."""
    last = {c["buckets"][-1]["params"][-1] for c in results["caps"]}
    if len(last) == 1:
        return (f"Every cap's last bucket is completed by `{last.pop()}`: its all-reduce starts after backward and "
                "cannot overlap it; only the buckets before it can.")
    return ("The last bucket's last tensor differs between caps (" + ", ".join(f"`{n}`" for n in sorted(last))
            + "): only the buckets before each cap's last can overlap backward.")


def timing_table(results: dict) -> str:
    """Per cap: median step and its range over repeats, tokens/s, the all-reduces summed and not hidden (ms)."""
    lines = [f"{'cap':>8} {'buckets':>7} {'step ms':>8} {'repeats min-max':>16} {'tokens/s':>9} "
             f"{'all-reduce ms':>13} {'not hidden ms':>13}"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>8} {c['count']:>7} {c['step_ms']:8.1f} "
                     f"{c['step_ms_range'][0]:7.1f}-{c['step_ms_range'][1]:<8.1f} {c['tokens_per_s']:9,.0f} "
                     f"{c['allreduce_ms']:13.2f} {c['after_last_ready_ms']:13.2f}")
    return "\n".join(lines)


def overlap_summary(results: dict) -> str:
    """Per cap, from the profiled steps: the overlapped share, the wait after backward, backward's
    autograd nodes (medians), and how many gloo threads ran all-reduces."""
    lines = [f"{'cap':>8} {'buckets':>7} {'overlapped':>10} {'after backward ms':>17} {'backward ms':>11} "
             f"{'gloo threads':>12}"]
    for c in results["caps"]:
        o = c["overlap"]
        lines.append(f"{c['cap']:>8} {c['count']:>7} {o['overlapped_share']:10.0%} {o['after_backward_ms']:17.2f} "
                     f"{o['backward_ms']:11.2f} {o['threads']:>12}")
    return "\n".join(lines)


def per_bucket_table(results: dict, cap: str = label(TRACE_CAP)) -> str:
    """One cap's all-reduces in launch order, medians over the profiled steps and both ranks: length,
    overlapped part, and start against backward's end (negative: while backward still ran)."""
    rows = by_cap(results)[cap]["overlap"]["rows"]
    pairs = len({(r["step"], r["rank"]) for r in rows})
    steps, ranks = len({r["step"] for r in rows}), len({r["rank"] for r in rows})
    lines = [f"bucket_cap_mb={cap}, medians over {pairs} (step, rank) pairs: {steps} profiled steps x {ranks} ranks:",
             f"{'all-reduce':>10} {'ms':>6} {'overlapped ms':>13} {'starts vs backward end, ms':>26}"]
    for k in sorted({r["allreduce"] for r in rows}):
        mine = [r for r in rows if r["allreduce"] == k]
        lines.append(f"{k:>10} {statistics.median([r['allreduce_ms'] for r in mine]):6.2f} "
                     f"{statistics.median([r['overlapped_ms'] for r in mine]):13.2f} "
                     f"{statistics.median([r['start_ms'] for r in mine]):+26.2f}")
    return "\n".join(lines)


def equality_table(results: dict) -> str:
    """Per cap: were both ranks bitwise equal after every block, and equal to the first block's weights?"""
    lines = [f"{'cap':>8} {'ranks bitwise equal':>19} {'max |diff|':>10} {'= first block':>13} {'max |diff|':>10}"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>8} {str(c['ranks_equal']):>19} {c['ranks_max_diff']:10.2e} "
                     f"{str(c['same_as_first_block']):>13} {c['first_block_max_diff']:10.2e}")
    return "\n".join(lines)


def fit_price(most: dict, default: dict) -> str:
    """The benchmark fit's price for the extra all-reduces: an estimate, and why it is one."""
    price, extra = most["predicted_ms"] - default["predicted_ms"], most["count"] - default["count"]
    return (f"Notebook 07's fit prices the {plural(extra, 'extra all-reduce')} at about {price:.1f} ms, an estimate: "
            "a line through one run's medians, while a sum of calls adds their means.")


def _against_alike(ms: float, alike: list[dict], what: str) -> str:
    """A profiled wait after backward set against its spread over the caps that make the same buckets (their noise)."""
    waits = [c["overlap"]["after_backward_ms"] for c in alike]
    if len(waits) < 2:
        return "."
    side = "above" if ms > max(waits) else "below" if ms < min(waits) else "within"
    return (f"; the caps that make the same {what} waited {and_list([f'{w:.1f}' for w in waits])} ms, and "
            f"{ms:.1f} lies {side} that spread.")


def takeaway(results: dict) -> str:
    """What this run shows, in sentences with its numbers; each verdict follows the data."""
    caps, config = results["caps"], results["config"]
    default, best, most = by_cap(results)["default"], fastest(results), most_buckets(results)
    d_o, m_o = default["overlap"], most["overlap"]
    params = lambda c: [b["params"] for b in c["buckets"]]  # noqa: E731
    alike = [c for c in caps if params(c) == params(default)]  # the same buckets: their differences are noise
    alike_what = "single bucket" if default["count"] == 1 else f"{default['count']} buckets"
    profiled = "medians, profiled steps"
    lines = [f"- Buckets: the caps swept made {min(c['count'] for c in caps)} to {most['count']} buckets"
             + (", each as the closing rule predicts" if all(c["rule_agrees"] for c in caps) else
                " (the closing rule fails where rule_table says False)")
             + f"; the default puts all {results['gradient_bytes'] / MiB:.2f} MiB in {default['count']}."]

    more = [c for c in caps if c["count"] > default["count"]]
    step_shares = lambda c: [overlapped_share([r for r in c["overlap"]["rows"] if (r["rank"], r["step"]) == k])  # noqa: E731
                             for k in dict.fromkeys((r["rank"], r["step"]) for r in c["overlap"]["rows"])]  # per step, rank
    misses = [c for c in more if verdict_over_repeats(step_shares(c), step_shares(default)) != "faster"]
    rule = "in every profiled (step, rank) than the default in any"
    lows = and_list([f"{min(step_shares(c)):.1%}" for c in misses])
    named = and_list([f"cap {c['cap']} ({plural(c['count'], 'bucket')})" for c in misses])
    compared = ("" if not more else f" Every cap with more buckets overlapped more {rule}." if not misses else
                f" No cap with more buckets overlapped more {rule}." if len(misses) == len(more) else
                f" {len(more) - len(misses)} of the {len(more)} caps with more buckets overlapped more {rule}; the "
                f"{'exception' if len(misses) == 1 else 'exceptions'}, {named}, had a step at {lows}, not above the "
                f"default's highest, {max(step_shares(default)):.1%}.")
    lines.append(f"- Overlap: {d_o['overlapped_share']:.0%} of the all-reduce time ran while backward computed with "
                 "the default caps" + (" (one bucket: not real overlap)" if default["count"] == 1 else "")
                 + f", {m_o['overlapped_share']:.0%} with {most['count']} buckets.{compared} After backward the step "
                 f"waited {d_o['after_backward_ms']:.1f} ms by default, {m_o['after_backward_ms']:.1f} ms with "
                 f"{most['count']} buckets ({profiled}){_against_alike(m_o['after_backward_ms'], alike, alike_what)}")

    if best["count"] == default["count"]:
        speed = (f"no cap with more buckets was faster; the shortest median step, {best['step_ms']:.1f} ms, came with "
                 f"{plural(best['count'], 'bucket')} (cap {best['cap']}).")
    elif verdict_over_repeats(best["step_ms_range"], default["step_ms_range"], higher_is_faster=False) == "faster":
        speed = (f"{best['count']} buckets (cap {best['cap']}) gave the shortest median step, {best['step_ms']:.1f} "
                 f"ms against {default['step_ms']:.1f} ms ({default['step_ms'] / best['step_ms']:.2f}x, every repeat "
                 "faster than every default one).")
    else:
        speed = (f"the fastest cap, {best['cap']} ({best['count']} buckets, {best['step_ms']:.1f} ms, repeats "
                 f"{ms_range(best)}), overlaps the default's repeats ({ms_range(default)}): no clear gain.")
    if len(alike) > 1:
        medians = and_list([f"{c['step_ms']:.1f}" for c in alike])
        speed += (f" The caps that make the same {alike_what} ({and_list([c['cap'] for c in alike])}) have medians "
                  f"of {medians} ms: this run's noise.")
    lines.append(f"- Speed: {speed}")

    extra_step = most["step_ms"] - default["step_ms"]
    versus = verdict_over_repeats(most["step_ms_range"], default["step_ms_range"], higher_is_faster=False)
    if versus == "slower":
        price = f" {fit_price(most, default)}" if most["predicted_ms"] is not None else ""
        backward = f"{m_o['backward_ms']:.1f} ms against {d_o['backward_ms']:.1f} ms ({profiled})"
        if m_o["backward_ms"] > 1.1 * d_o["backward_ms"]:
            alike_backward = [c["overlap"]["backward_ms"] for c in alike]
            spread = (f"; {min(alike_backward):.1f}-{max(alike_backward):.1f} ms across the caps that make the "
                      f"same {alike_what}" if len(alike) > 1 else "")
            why = (f" Backward's autograd nodes took longer, {backward}{spread}: gloo's threads share the "
                   f"{results['provenance'].cores} logical CPUs with backward, and the per-bucket work runs inside "
                   "backward's nodes, here with the lab's Python comm hook on every bucket (stock DDP scales in C++; "
                   f"notebook 15 times it without a hook). With {config['plan']['profiled'] * config['world_size']} "
                   "samples per cap, a correlation, not a measured cause.")
        else:
            why = f" Backward's autograd nodes took about as long, {backward}: the extra time is outside them."
        lines.append(f"- Cost: with {most['count']} buckets the step took {most['step_ms']:.1f} ms, "
                     f"{most['step_ms'] / default['step_ms']:.2f}x the default's ({extra_step:.1f} ms more).{price}{why}")
    elif versus == "faster":
        lines.append(f"- Cost: even with {most['count']} buckets the step was shorter, {most['step_ms']:.1f} ms against "
                     f"{default['step_ms']:.1f} ms, every repeat below every default one; the trace does not say "
                     "which part gained.")
    else:
        lines.append(f"- Cost: with {most['count']} buckets the step took {most['step_ms']:.1f} ms against "
                     f"{default['step_ms']:.1f} ms by default: no clear difference, the repeats' ranges overlap.")
    equal = sum(c["ranks_equal"] for c in caps)
    same = all(c["same_as_first_block"] for c in caps)
    lines.append(f"- Equality: both ranks bitwise equal after every block for {equal} of {len(caps)} caps; "
                 + ("every block ended with the same weights, whatever the cap."
                    if same else "the caps' final weights differ from each other (equality_table)."))
    return "\n".join(lines)


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
