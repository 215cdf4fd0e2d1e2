"""Gradient compression on gloo: DDP's fp16 and bf16 compress hooks and PowerSGD against the plain
all-reduce, in bytes on the sockets, learning, and whether the ranks stay bitwise equal.

    python -m minitrain.measure.compression [--out DIR] [--quick]

The driver starts this module under the lab's torchrun (2 ranks, loopback only). Each rank trains
a fresh MiniGPT per variant from the same seeds on the same batches (experiments/35-ddp-cpu/
train.py's model, batch and AdamW), with the variant's comm hook inside the lab's instrumented
hook; it reads the kernel's byte counters of the gloo connection around the steps. It does not
time them: one bucket on one machine's loopback says nothing about a network. More plain runs with other seeds give the yardstick for
learning: how much the seed alone moves validation loss and grammar accuracy. Before training,
the ranks all-reduce pytorch/pytorch#152300's fp16 reproducer and compare it with the exact sum.
The driver scores each run's weights and writes compression.json and compression.png.
"""

import math
import statistics
import tempfile
from pathlib import Path

import numpy as np

from minitrain.artifacts import save_figure
from minitrain.data import SEED_BASE
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.measure.compression_ranks import (CONTROL_SEED_STEP, MIN_COMPRESSION_RATE, RUN_MARK, VARIANTS, Plan,
                                                 powersgd_matrices, powersgd_rank, theory, worker)
from minitrain.measure.measurement import Measurement, progress, relaunch
from minitrain.measure.scoring import final_metrics, one_thread_per_process, scoring_pairs
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.train import TrainConfig
from minitrain.verify import Comparison, compare_state_files

PLOT_NAME = "compression.png"
ISSUE = "pytorch/pytorch#152300"


# ------------------------------------------------------------------------------------------------
# The driver: launch, score, write


def sent_per_step(run: dict, first: int, last: int, steps: int) -> float | None:
    """New bytes (sent minus retransmitted) per step between two of a run's byte marks."""
    a, b = run["bytes"][first], run["bytes"][last]
    if not (a and b) or not steps:
        return None
    return ((b["sent"] - b["retransmitted"]) - (a["sent"] - a["retransmitted"])) / steps


def analyse(notes: list[dict], scores: dict[tuple[str, int], dict], states: dict[tuple[str, int], Comparison],
            pairs: int) -> dict:
    """compression.json's content (without provenance) from both ranks' notes, each run's scores
    (val loss, accuracy; ("before", 0): the initial weights), each run's two state files compared,
    and the number of minimal pairs scored."""
    first = notes[0]
    plan, shapes, n = first["plan"], first["shapes"], first["world_size"]
    measured_steps = plan["steps"] - plan["warmup"]
    values = sum(math.prod(s) for s in shapes.values())
    controls_runs = [key for key in scores if key[0] == "plain"]
    spread = {metric: statistics.stdev(scores[k][metric] for k in controls_runs) if len(controls_runs) > 1 else None
              for metric in ("val_loss", "accuracy")}
    plain = scores[("plain", SEED_BASE)]

    variants = []
    for variant in plan["variants"]:
        runs = [next(r for r in note["runs"] if r["variant"] == variant and r["seed"] == SEED_BASE) for note in notes]
        sent = [sent_per_step(r, 1, 2, measured_steps) for r in runs]
        warm = [sent_per_step(r, 0, 1, plan["warmup"]) for r in runs]
        score, comparison = scores[(variant, SEED_BASE)], states[(variant, SEED_BASE)]
        variants.append({
            "name": variant, "label": VARIANTS[variant], "theory": theory(variant, shapes, n),
            "sent_per_rank": None if None in sent else sent,
            "sent": None if None in sent else statistics.fmean(sent),
            "warmup_sent": None if None in warm else statistics.fmean(warm),
            "val_loss": score["val_loss"], "accuracy": score["accuracy"],
            "val_loss_minus_plain": score["val_loss"] - plain["val_loss"],
            "accuracy_minus_plain": score["accuracy"] - plain["accuracy"],
            "train_loss_last_20": statistics.fmean(runs[0]["loss"][-20:]),
            "ranks_bitwise_equal": comparison.bitwise_equal, "ranks_max_abs_diff": comparison.max_abs_diff,
            "powersgd_counted": runs[0]["powersgd"],
        })
    plain_row = variants[0]
    for row in variants:
        row["theory"]["over_plain"] = row["theory"]["bytes"] / plain_row["theory"]["bytes"]
        row["sent_over_theory"] = row["sent"] / row["theory"]["bytes"] if row["sent"] is not None else None
        row["sent_over_plain"] = row["sent"] / plain_row["sent"] if row["sent"] is not None else None
        row["val_loss_shift_in_spreads"] = row["val_loss_minus_plain"] / spread["val_loss"] if spread["val_loss"] else None
        row["accuracy_shift_in_spreads"] = (row["accuracy_minus_plain"] / spread["accuracy"]
                                            if spread["accuracy"] else None)
    return {
        "config": {"world_size": n, "threads_per_rank": first["threads"], "batch_size_per_rank": TrainConfig.batch_size,
                   "global_batch": TrainConfig.batch_size * n, "block_size": TrainConfig.block_size,
                   "lr": TrainConfig.lr, "plan": plan,
                   "model_params": values, "gradient_bytes": 4 * values,
                   "powersgd": {"start_powerSGD_iter": plan["warmup"], "min_compression_rate": MIN_COMPRESSION_RATE,
                                "use_error_feedback": True, "warm_start": True}},
        "variants": variants,
        "powersgd_matrices": {str(r): powersgd_matrices(shapes, r) for r in sorted(
            {powersgd_rank(v) for v in plan["variants"]} - {None})},
        "seed_controls": [{"seed": seed, **scores[("plain", seed)]} for _, seed in controls_runs if seed != SEED_BASE],
        "seed_spread": spread | {"runs": len(controls_runs),
                                 "method": "sample standard deviation over the plain all-reduce runs with seed "
                                           f"bases {SEED_BASE} + {CONTROL_SEED_STEP} k (model init and data order)"},
        "before_training": scores[("before", 0)],
        "pairs": pairs,
        "half_allreduce_check": first["half_check"] | {"issue": ISSUE},
        "bytes_source": ("the kernel's tcp_info counters of gloo's pair sockets (ss -tin), read in each rank around "
                         f"the steps after the warm-up ({measured_steps} steps)" if plain_row["sent"] is not None
                         else "not available on this OS (needs Linux's ss and /proc)"),
    }


def score_runs(runs: list[dict], work: Path, corpus_dir: Path, plan: Plan) -> tuple[dict, dict, int]:
    """Validation loss and minimal-pair accuracy of each run's rank-0 weights (and of the initial
    weights, key ("before", 0)); each run's rank-0 and rank-1 state files compared; the pairs scored."""
    pairs = scoring_pairs(corpus_dir, plan.pairs)
    scores, states = {("before", 0): final_metrics(None, corpus_dir, pairs, plan.val_batches)}, {}
    for run in runs:
        key, rank0 = (run["variant"], run["seed"]), work / run["state_file"]
        scores[key] = final_metrics(rank0, corpus_dir, pairs, plan.val_batches)
        states[key] = compare_state_files(rank0, work / run["state_file"].replace("rank0", "rank1"))
    return scores, states, len(pairs)


def measure(out: Path, plan: Plan, corpus_dir: Path, echo) -> dict:
    """Both ranks over every variant, then the weights scored: compression.json's content."""
    with tempfile.TemporaryDirectory() as tmp:
        with progress(len(plan.variants) + plan.seed_controls, "runs") as bar:
            def show(line: str) -> None:  # quiet: a failure raises with the run's last lines
                if line.startswith(RUN_MARK):
                    bar.set_postfix_str(line.removeprefix(RUN_MARK).strip())
                    bar.update()
            notes = relaunch(MEASUREMENT, plan, corpus_dir, Path(tmp), timeout=1800, echo=show)
        with one_thread_per_process():  # as the controls score theirs
            results = analyse(notes, *score_runs(notes[0]["runs"], Path(tmp), corpus_dir, plan))
    return results | {"quick": plan == Plan.quick()}


def by_name(results: dict) -> dict[str, dict]:
    """The results' variants by name."""
    return {v["name"]: v for v in results["variants"]}


def findings(results: dict) -> list[Finding]:
    """Bytes against plain, learning against the seed spread, equal ranks, #152300."""
    rows = by_name(results)
    fp16, psgd = rows.get("fp16"), rows.get("powersgd-1")
    spread = results["seed_spread"]
    shifts = {v["name"]: v["val_loss_shift_in_spreads"] for v in results["variants"][1:]}
    known = {k: s for k, s in shifts.items() if s is not None}
    worst = max(known, key=lambda k: abs(known[k])) if known else None
    equal = sum(v["ranks_bitwise_equal"] for v in results["variants"])
    check = results["half_allreduce_check"]
    compressed = [(key, row) for key, row in (("fp16", fp16), ("powersgd_rank1", psgd)) if row is not None]
    records = [Finding(f"{key}_bytes_over_plain", row["sent_over_plain"], "ratio",
                       f"bytes each rank's gloo sockets sent per step with {row['label']} against the plain "
                       f"all-reduce (theory {row['theory']['over_plain']:.3f})" if row["sent"] is not None
                       else "socket counters are not available on this OS") for key, row in compressed]
    records.append(Finding(
        "largest_val_loss_shift", known[worst] if worst else None, "seed spreads",
        (f"validation loss minus plain's, in seed spreads ({spread['val_loss']:.4f} nats, the standard deviation "
         f"of {spread['runs']} plain runs with different seeds), largest in size: {worst}; all: "
         + ", ".join(f"{k} {s:+.2f}" for k, s in known.items())) if worst
        else "needs at least two plain runs with different seeds"))
    records.append(Finding("variants_with_bitwise_equal_ranks", equal, f"of {len(results['variants'])} variants",
                           "rank 1's weights bitwise equal to rank 0's after training"))
    records.append(Finding("gloo_fp16_allreduce_mismatches", check["dtypes"]["float16"]["mismatches"], "elements",
                           f"of {check['elements']:,} in {ISSUE}'s reproducer, all-reduced in float16 by gloo, "
                           "against the exact sum rounded once"))
    return records


# ------------------------------------------------------------------------------------------------
# Tables, the figure, the takeaway


def what_ran(results: dict) -> str:
    """The runs, for the provenance line."""
    c = results["config"]
    return (f"{len(c['plan']['variants'])} variants and {plural(len(results['seed_controls']), 'more plain run')} with other "
            f"seeds, {c['plan']['steps']} steps each, {c['world_size']} ranks x {plural(c['threads_per_rank'], 'thread')}, "
            f"{c['global_batch']} sequences x {c['block_size']} tokens per step, lr {c['lr']:g}")


def powersgd_table(results: dict) -> str:
    """Each gradient as PowerSGD views it (n x m), and what it sends per rank r: P + Q or the whole."""
    matrices = results["powersgd_matrices"]
    ranks = list(matrices)
    lines = [f"{'gradient':<26}{'n x m':>12}" + "".join(f"{'r=' + r + ': sends':>18}" for r in ranks)]
    for i, row in enumerate(matrices[ranks[0]]):
        cells = []
        for r in ranks:
            m = matrices[r][i]
            cells.append(f"{m['p']:,} + {m['q']:,}" if m["compressed"] else f"{m['uncompressed']:,} as is")
        lines.append(f"{row['name']:<26}{row['n']:>6} x {row['m']:<5}" + "".join(f"{c:>18}" for c in cells))
    total = results["config"]["model_params"]
    for r in ranks:
        t = theory(f"powersgd-{r}", {m["name"]: [m["n"], m["m"]] for m in matrices[r]}, 2)
        sent = t["p"] + t["q"] + t["uncompressed"]
        lines.append(f"r={r}: {t['compressed_matrices']} matrices compressed; per step P {t['p']:,} + "
                     f"Q {t['q']:,} + uncompressed {t['uncompressed']:,} = {sent:,} values of {total:,} "
                     f"({sent / total:.1%})")
    return "\n".join(lines)


def bytes_table(results: dict) -> str:
    """Bytes per step and rank: theory, the sockets, the bytes above the theory, and each against plain."""
    lines = [f"{'variant':<12}{'all-reduces':>12}{'theory B':>12}{'sockets B':>12}{'above B':>9}{'theory/plain':>14}"
             f"{'sockets/plain':>15}{'warm-up B':>12}"]
    for v in results["variants"]:
        t, measured = v["theory"], v["sent"] is not None
        sockets = (f"{v['sent']:>12,.0f}{v['sent'] - t['bytes']:>9,.0f}" if measured else f"{'-':>12}{'-':>9}")
        ratios = (f"{v['sent_over_plain']:>15.3f}{v['warmup_sent']:>12,.0f}" if measured else f"{'-':>15}{'-':>12}")
        lines.append(f"{v['name']:<12}{t['allreduces_per_bucket']:>12}{t['bytes']:>12,.0f}{sockets}"
                     f"{t['over_plain']:>14.3f}{ratios}")
    lines.append(f"(per rank per step, all-reduces per bucket; sockets: {results['bytes_source']}; warm-up: the "
                 f"first {results['config']['plan']['warmup']} steps, the plain all-reduce for PowerSGD too)")
    return "\n".join(lines)


def above_text(results: dict) -> str:
    """A sentence: the bytes the sockets sent above the theory, per all-reduce a bucket takes, the same for every
    variant or not, against the range of bytes the variants all-reduce; '' without socket counters."""
    measured = [v for v in results["variants"] if v["sent"] is not None]
    if not measured:
        return ""
    above = {v["name"]: round((v["sent"] - v["theory"]["bytes"]) / v["theory"]["allreduces_per_bucket"])
             for v in measured}  # to the byte, as printed
    sizes = [v["theory"]["bytes"] for v in measured]
    if len(set(above.values())) == 1:
        return (f"Every variant sent {next(iter(above.values())):,} bytes a step above the theory per all-reduce a "
                f"bucket takes, for {min(sizes):,.0f} to {max(sizes):,.0f} bytes in theory: here the excess follows "
                "the number of all-reduces, not their size.")
    return ("Above the theory, per all-reduce a bucket takes: " + ", ".join(f"{k} {b:,}" for k, b in above.items())
            + " bytes a step: not the same for every variant, so not set by the number of all-reduces alone.")


def counted_check(results: dict) -> str:
    """PowerSGD's own count of what it sent against the theory from the shapes."""
    lines = []
    for v in results["variants"]:
        counted = v["powersgd_counted"]
        if counted:
            t = v["theory"]
            same = (counted["p_numel"], counted["q_numel"], counted["numel_after_per_step"]) == (
                t["p"], t["q"], t["p"] + t["q"] + t["uncompressed"])
            lines.append(f"{v['name']}: PowerSGD's state holds P {counted['p_numel']:,} and Q {counted['q_numel']:,} "
                         f"values and counted {counted['numel_after_per_step']:,.0f} values sent per step: "
                         f"the same as the theory: {same}")
    return "\n".join(lines)


def learning_table(results: dict) -> str:
    """Validation loss and accuracy per variant, their difference from plain in seed spreads, equal ranks."""
    spread = results["seed_spread"]
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    lines = [f"{'variant':<12}{'val loss':>9}{'- plain':>9}{'in spreads':>11}{'accuracy':>10}{'- plain':>9}"
             f"{'in spreads':>11}  ranks bitwise equal"]
    for v in results["variants"]:
        lines.append(f"{v['name']:<12}{v['val_loss']:>9.4f}{v['val_loss_minus_plain']:>+9.4f}"
                     f"{fmt(v['val_loss_shift_in_spreads'], '+.2f'):>11}{v['accuracy']:>10.3f}"
                     f"{v['accuracy_minus_plain']:>+9.3f}{fmt(v['accuracy_shift_in_spreads'], '+.2f'):>11}"
                     f"  {v['ranks_bitwise_equal']}")
    for c in results["seed_controls"]:
        lines.append(f"{'seed ' + str(c['seed']):<12}{c['val_loss']:>9.4f}{'':>20}{c['accuracy']:>10.3f}"
                     "  (plain, another seed)")
    before = results["before_training"]
    lines.append(f"before training: val loss {before['val_loss']:.4f}, accuracy {before['accuracy']:.3f}")
    lines.append(f"seed spread (yardstick): val loss {fmt(spread['val_loss'], '.4f')} nats, accuracy "
                 f"{fmt(spread['accuracy'], '.4f')} ({spread['method']}; {spread['runs']} runs); "
                 f"{results['pairs']} pairs")
    return "\n".join(lines)


def half_check_table(results: dict) -> str:
    """#152300's reproducer all-reduced by this torch's gloo: elements that differ from the exact sum."""
    check = results["half_allreduce_check"]
    lines = [f"{check['issue']}'s reproducer: {check['elements']:,} values per rank, uniform over float16's range"]
    for dtype, c in check["dtypes"].items():
        lines.append(f"  {dtype}: {c['mismatches']:,} elements differ from the exact sum rounded once "
                     f"({c['overflowed_to_inf']:,} sums overflow to inf in both)")
    return "\n".join(lines)


def plot(results: dict, out: Path) -> None:
    """Bytes (sockets vs theory); validation loss and accuracy against plain's, the band one seed spread either side."""
    import matplotlib.pyplot as plt

    rows = results["variants"]
    names = [v["name"] for v in rows]
    x = np.arange(len(rows))
    fig, (ax1, ax3, ax4) = plt.subplots(1, 3, figsize=(16, 5.2))
    ticks = {"labels": names, "rotation": 20, "ha": "right"}  # names side by side would overlap
    below = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.17), "fontsize": 8}  # legends off the data

    theory_kb = [v["theory"]["bytes"] / 1e3 for v in rows]
    if rows[0]["sent"] is not None:
        bars = ax1.bar(x - 0.2, [v["sent"] / 1e3 for v in rows], 0.4, color="#55a868", label="sockets (measured)")
        ax1.bar_label(bars, [f"{v['sent_over_plain']:.3f}x" for v in rows], fontsize=8)
    else:
        ax1.text(0.5, 0.5, "socket counters:\nnot available on this OS", transform=ax1.transAxes, ha="center")
    ax1.bar(x + 0.2, theory_kb, 0.4, color="#4c72b0", label="theory: 2(N-1)/N x what is all-reduced, N ranks")
    ax1.set_xticks(x, **ticks)
    ax1.set_ylabel("kB sent per rank per step")
    ax1.set_title("Bytes on the wire (labels: measured / plain)")
    ax1.legend(**below)

    spread = results["seed_spread"]
    for ax, key, label in ((ax3, "val_loss", "validation loss (nats)"), (ax4, "accuracy", "minimal-pair accuracy")):
        values = [v[key] for v in rows]
        ax.plot(x, values, "o", color="#c44e52", ms=8, zorder=3)
        for i, value in enumerate(values):
            ax.annotate(f"{value:.3f}" if key == "accuracy" else f"{value:.4f}", (i, value), xytext=(0, 8),
                        textcoords="offset points", ha="center", fontsize=8)
        seeds = [c[key] for c in results["seed_controls"]]
        ax.plot([-0.25] * len(seeds), seeds, "x", color="0.3", ms=7, label="plain, other seeds")
        if band := seed_band(results, key):  # the takeaway's criterion, drawn
            ax.axhspan(*band, color="0.85", zorder=0,
                       label=f"plain ± 1 seed spread (sd of {spread['runs']} plain runs)")
        ax.margins(y=0.15)
        ax.set_xticks(x, **ticks)
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_ylabel(label)
        ax.legend(**below)
    ax3.set_title(f"Learning after {results['config']['plan']['steps']} steps, same global batch")
    ax4.set_title(f"Grammar probe, {results['pairs']} pairs")

    config, prov = results["config"], results["provenance"]
    fig.suptitle(f"Gradient compression on gloo: {config['world_size']} ranks x "
                 f"{plural(config['threads_per_rank'], 'thread')}, {prov.cores} logical CPUs, torch {prov.torch}",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


def checks(results: dict) -> dict[str, bool]:
    """The facts a run must show on any machine (a live run asserts each holds: show_checks); where
    the OS has no socket counters, the bytes are not checked."""
    fp16 = by_name(results)["fp16"]
    halved = ({} if fp16["sent"] is None else
              {f"fp16 sent about half of plain's bytes ({fp16['sent_over_plain']:.3f}x)":
               0.49 < fp16["sent_over_plain"] < 0.52})
    return halved | {"both ranks bitwise equal with every hook": all(v["ranks_bitwise_equal"]
                                                                    for v in results["variants"])}


def seed_band(results: dict, key: str) -> tuple[float, float] | None:
    """Plain's value (the variants' own seed) ± one seed spread of `key`: a variant inside it is "within one seed
    spread" of plain, in the figure and in the takeaway alike; None without a spread."""
    spread, plain = results["seed_spread"][key], results["variants"][0][key]
    return (plain - spread, plain + spread) if spread else None


def takeaway(results: dict) -> str:
    """The notebook's takeaway sentences, with this run's numbers and verdicts."""
    lines = []
    if results["variants"][0]["sent"] is not None:
        lines.append("- Bytes per step against plain, measured (theory): " + ", ".join(
            f"{v['name']} {v['sent_over_plain']:.3f} ({v['theory']['over_plain']:.3f})" for v in results["variants"][1:])
            + ".")
    if band := seed_band(results, "val_loss"):
        inside = [v["name"] for v in results["variants"][1:] if band[0] <= v["val_loss"] <= band[1]]
        outside = [v["name"] for v in results["variants"][1:] if v["name"] not in inside]
        plan = results["config"]["plan"]
        lines.append(f"- Validation loss after {plan['steps']} steps (PowerSGD compressed the last "
                     f"{plan['steps'] - plan['warmup']}), against plain's: within one seed spread: "
                     f"{', '.join(inside) or 'none'}; beyond it: {', '.join(outside) or 'none'}.")
    equal = sum(v["ranks_bitwise_equal"] for v in results["variants"])
    lines.append(f"- Ranks bitwise equal after training: {equal} of {len(results['variants'])} variants.")
    check = results["half_allreduce_check"]["dtypes"]
    lines.append(f"- {ISSUE}: {check['float16']['mismatches']:,} float16 and {check['bfloat16']['mismatches']:,} "
                 f"bfloat16 elements differed from the exact sum with this torch's gloo.")
    return "\n".join(lines)


MEASUREMENT = Measurement("compression", "Gradient compression on gloo: fp16, bf16 and PowerSGD comm hooks against "
                          "the plain all-reduce", "12-gradient-compression.ipynb", (PLOT_NAME,), measure, findings,
                          plot, bytes_table, Plan.quick.__doc__, Plan, worker)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
