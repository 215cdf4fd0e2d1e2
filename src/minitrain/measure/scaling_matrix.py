"""When do 2 processes win? Four CPU configurations, weak and strong scaling, several model sizes.

    python -m minitrain.measure.scaling_matrix [--out DIR] [--repeats 3] [--quick]

The lab sheet expects 2 DDP processes to be slower than 1 on a laptop. This runs the lab's train.py
as 1 process x 1 thread, 1 process x all cores, 2 processes x 1 thread, and 2 processes pinned to
one core; with the per-rank batch fixed (weak scaling, as the sheet) and with the global batch
fixed (strong scaling); for model sizes from ~0.3M to ~5M parameters, each point repeated.
It writes scaling_matrix.json (every run, the points, the summary, the findings) and scaling_matrix.png.
"""

import itertools
import os
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt

from minitrain.artifacts import save_figure
from minitrain.cli import positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.measurement import Measurement, fresh_folder, progress, runs_folder
from minitrain.measure.scaling_runs import (ALL_CORES, BLOCK_SIZE, ONE_THREAD, PINNED, QUICK_SIZE, SCALINGS, SIZES,
                                            STRONG_GLOBAL_BATCH, TWO_PROCS, WEAK_BATCH, Size, batches,
                                            configurations, measure)
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.provenance import usable_cores
from minitrain.timing import summarize

PLOT_NAME = "scaling_matrix.png"


@dataclass(frozen=True)
class Plan:
    """The configurations (by name), model sizes, scalings and repeats of a matrix."""

    configs: tuple[str, ...] = (ONE_THREAD, ALL_CORES, TWO_PROCS, PINNED)
    sizes: tuple[Size, ...] = SIZES
    scalings: tuple[str, ...] = SCALINGS
    repeats: int = 3

    @classmethod
    def quick(cls) -> "Plan":
        """One size, one repeat, few steps, 2 configurations, weak scaling only."""
        return cls(configs=(ALL_CORES, PINNED), sizes=(QUICK_SIZE,), scalings=("weak",), repeats=1)


def measure_matrix(out: Path, plan: Plan, corpus_dir: Path, echo, repeats: int | None = None) -> dict:
    """Run the matrix (`repeats`: instead of the plan's): scaling_matrix.json's content."""
    plan = replace(plan, repeats=repeats) if repeats else plan
    out = Path(out).resolve()
    configs = [c for c in configurations() if c.name in plan.configs]
    sizes, scalings, repeats = plan.sizes, plan.scalings, plan.repeats
    load_before, started = os.getloadavg(), time.perf_counter()
    runs = []
    # repeats outermost: a change in the machine's load hits every configuration alike
    plan = [(repeat, size, config, batch, served)
            for repeat, size in itertools.product(range(repeats), sizes) for config in configs
            for batch, served in batches(config, scalings).items()]
    with fresh_folder(runs_folder(out, MEASUREMENT.name)) as scratch, progress(len(plan), "runs") as bar:
        for repeat, size, config, batch, served in plan:
            folder = Path(scratch) / f"r{repeat}-{size.n_layer}x{size.n_embd}-{config.name}-b{batch}"
            run = measure(config, size, batch, served, folder, corpus_dir) | {"repeat": repeat}
            runs.append(run)
            bar.write(f"[repeat {repeat + 1}/{repeats}] {run['params'] / 1e6:.2f}M params, "
                      f"{config.label}, batch {batch}/rank ({'+'.join(served)}): "
                      f"{run['tokens_per_sec']['median']:,.0f} tokens/s, all-reduce "
                      f"{run['allreduce_share']:.0%} of the step ({run['wall_s']:.0f} s)")
            bar.update()
    results = {
        "quick": plan == Plan.quick(), "repeats": repeats, "block_size": BLOCK_SIZE,
        "weak_batch_per_rank": WEAK_BATCH, "strong_global_batch": STRONG_GLOBAL_BATCH,
        "timing": "hook (comm hook; no barriers around backward)",
        "configurations": [asdict(c) for c in configs],
        "sizes": [asdict(s) for s in sizes],
        "cores": usable_cores(),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "wall_s": time.perf_counter() - started,
        "runs": runs,
    }
    results["points"] = points(runs)
    results["summary"] = summary(results)
    return results


def points(runs: list[dict]) -> list[dict]:
    """One point per (scaling, configuration, model size): medians across repeats, and their spread."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        for scaling in run["scaling"]:
            groups[(scaling, run["config"], run["params"])].append(run)
    result = []
    for (scaling, config, params), group in sorted(groups.items()):
        tps = [r["tokens_per_sec"]["median"] for r in group]
        result.append({"scaling": scaling, "config": config, "params": params, "repeats": len(group),
                       "tokens_per_sec": summarize(tps) | {"min": min(tps), "max": max(tps)},
                       "allreduce_share": statistics.median(r["allreduce_share"] for r in group)})
    return result


# Ratios of median tokens/s that answer the sheet's question, as (numerator, denominator).
RATIOS = {
    "speedup_2proc_over_1proc_allcores": (TWO_PROCS, ALL_CORES),
    "speedup_2proc_over_1proc_1thread": (TWO_PROCS, ONE_THREAD),
    "pinned_over_2proc": (PINNED, TWO_PROCS),
    "pinned_over_1proc_1thread": (PINNED, ONE_THREAD),
    "pinned_over_1proc_allcores": (PINNED, ALL_CORES),
}
CONFIG_ORDER = (ONE_THREAD, ALL_CORES, TWO_PROCS, PINNED)


def summary(results: dict) -> dict:
    """The headline numbers: ratios per size and scaling, their ranges, the largest all-reduce
    share, and where two configurations' throughput lines cross. Absent configurations give None."""
    pts = points(results["runs"])
    median = {(p["scaling"], p["config"], p["params"]): p["tokens_per_sec"]["median"] for p in pts}
    share = {(p["scaling"], p["config"], p["params"]): p["allreduce_share"] for p in pts}
    sizes = sorted({n for _, _, n in median})
    scalings = [s for s in SCALINGS if any(key[0] == s for key in median)]

    def ratio(scaling: str, a: str, b: str, n: int) -> float | None:
        if (scaling, a, n) not in median or (scaling, b, n) not in median:
            return None
        return median[(scaling, a, n)] / median[(scaling, b, n)]

    per_size = [{"params": n,
                 **{name: {s: ratio(s, a, b, n) for s in scalings} for name, (a, b) in RATIOS.items()},
                 "allreduce_share_2proc": {s: share.get((s, TWO_PROCS, n)) for s in scalings},
                 "allreduce_share_pinned": {s: share.get((s, PINNED, n)) for s in scalings}}
                for n in sizes]
    ranges = {name: {s: _range([row[name][s] for row in per_size]) for s in scalings}
              for name in (*RATIOS, "allreduce_share_2proc")}
    largest_share = {}
    for s in scalings:
        shares = [(row["allreduce_share_2proc"][s], row["params"]) for row in per_size
                  if row["allreduce_share_2proc"][s] is not None]
        largest_share[s] = ({"params": max(shares)[1], "share": max(shares)[0]} if shares else None)
    loads = [r["load_average_1min"] for r in results["runs"] if "load_average_1min" in r]
    return {"sizes": sizes, "scalings": scalings, "cores": results["cores"],
            "load_average_1min": _range(loads),
            "per_size": per_size, "ranges": ranges, "largest_allreduce_share_2proc": largest_share,
            "crossings": [c for s in scalings for c in crossings(pts, s)]}


def _range(values: list[float | None]) -> list[float] | None:
    present = [v for v in values if v is not None]
    return [min(present), max(present)] if present else None


def crossings(pts: list[dict], scaling: str) -> list[dict]:
    """Every pair of configurations whose faster one (by median) changes between neighbouring
    sizes; `separated` says whether the repeats' min-max ranges kept apart on both sides."""
    tps = {(p["config"], p["params"]): p["tokens_per_sec"] for p in pts if p["scaling"] == scaling}
    sizes = sorted({n for _, n in tps})
    found = []
    for a, b in itertools.combinations([c for c in CONFIG_ORDER if any(k[0] == c for k in tps)], 2):
        both = [n for n in sizes if (a, n) in tps and (b, n) in tps]
        for n0, n1 in zip(both, both[1:]):
            a_led, a_leads = (tps[(a, n)]["median"] > tps[(b, n)]["median"] for n in (n0, n1))
            if a_led != a_leads:
                span = lambda c, n: [tps[(c, n)]["min"], tps[(c, n)]["max"]]  # noqa: E731 (the repeats' range)
                separated = all(verdict_over_repeats(span(a, n), span(b, n)) != "no clear winner" for n in (n0, n1))
                found.append({"scaling": scaling, "between_params": [n0, n1],
                              "faster_before": a if a_led else b, "faster_after": a if a_leads else b,
                              "separated": separated})
    return found


def params_label(params: int) -> str:
    """4871424 -> '4.87M'."""
    return f"{params / 1e6:.2f}M"


def findings(results: dict) -> list[Finding]:
    """Per scaling: 2 processes against 1 process on all cores (range over sizes), the largest
    all-reduce share, and the crossings that the repeats' spread keeps apart."""
    summ, records = results["summary"], []
    for scaling in summ["scalings"]:
        ratios = summ["ranges"]["speedup_2proc_over_1proc_allcores"][scaling]
        if ratios:
            records.append(Finding(f"{scaling}_2proc_over_1proc_allcores", ratios, "ratio range over sizes",
                                   f"tokens/s of 2 processes x 1 thread over 1 process on all cores, "
                                   f"{scaling} scaling, {params_label(summ['sizes'][0])}-"
                                   f"{params_label(summ['sizes'][-1])} parameters (medians of repeats)"))
        largest = summ["largest_allreduce_share_2proc"][scaling]
        if largest:
            records.append(Finding(f"{scaling}_largest_allreduce_share", largest["share"], "fraction of the step",
                                   f"the comm hook's share of a 2-process step, largest at "
                                   f"{params_label(largest['params'])} parameters ({scaling} scaling)"))
        clear = [c for c in summ["crossings"] if c["scaling"] == scaling and c["separated"]]
        records.append(Finding(f"{scaling}_clear_crossings", len(clear), "crossings",
                               "; ".join(f"{c['faster_before']} -> {c['faster_after']} between "
                                         f"{params_label(c['between_params'][0])} and "
                                         f"{params_label(c['between_params'][1])}" for c in clear)
                               or "no configuration overtakes another beyond the spread of the repeats"))
    return records


STYLE = {ONE_THREAD: ("#8c8c8c", "o"), ALL_CORES: ("#4c72b0", "s"), TWO_PROCS: ("#dd8452", "^"),
         PINNED: ("#c44e52", "v")}


def results_table(results: dict) -> str:
    """Tokens/s (median [min-max] over repeats) and the comm hook's share of the step, per configuration and size."""
    labels = {c["name"]: c["label"] for c in results["configurations"]}
    points = {(p["scaling"], p["config"], p["params"]): p for p in results["points"]}
    sizes = results["summary"]["sizes"]
    header = f"{'':<30}" + "".join(f"{params_label(n):>22}" for n in sizes)
    lines = []
    for scaling in results["summary"]["scalings"]:
        lines += [f"{scaling} scaling: tokens/s", header]
        for name, label in labels.items():
            cells = [points.get((scaling, name, n)) for n in sizes]
            lines.append(f"{label:<30}" + "".join(
                f"{p['tokens_per_sec']['median']:>8,.0f} [{p['tokens_per_sec']['min']:,.0f}-"
                f"{p['tokens_per_sec']['max']:,.0f}]".rjust(22) if p else f"{'-':>22}" for p in cells))
        lines.append(f"{scaling} scaling: all-reduce (comm hook) share of the step; 1 process: DDP at world size 1")
        for name in labels:
            cells = [points.get((scaling, name, n)) for n in sizes]
            lines.append(f"{labels[name]:<30}" + "".join(
                f"{p['allreduce_share']:>22.0%}" if p else f"{'-':>22}" for p in cells))
        lines.append("")
    return "\n".join(lines)


def pinned_demo(corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict:
    """One run of the pinned configuration with the quick model into a temporary folder, deleted
    afterwards; the run's record as `measure` returns it, its command showing the folder as DIR."""
    ensure_corpus(corpus_dir)
    pinned = next(c for c in configurations() if c.name == PINNED)
    with tempfile.TemporaryDirectory(prefix="pinned-demo-") as tmp:
        demo = measure(pinned, QUICK_SIZE, WEAK_BATCH, ["weak"], Path(tmp), corpus_dir)
    return demo | {"command": demo["command"].replace(tmp, "DIR")}


def plot_matrix(results: dict, out: Path) -> None:
    """scaling_matrix.png: tokens/s against model size (weak, strong), and the all-reduce share."""
    labels = {c["name"]: c["label"] for c in results["configurations"]}
    pts = results["points"]
    sizes = sorted({p["params"] for p in pts})
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    titles = {"weak": f"Weak scaling: {results['weak_batch_per_rank']} sequences per rank",
              "strong": f"Strong scaling: {results['strong_global_batch']} sequences per step in total"}
    for ax, scaling in zip(axes, SCALINGS):
        for i, config in enumerate(CONFIG_ORDER):
            mine = sorted((p for p in pts if p["scaling"] == scaling and p["config"] == config),
                          key=lambda p: p["params"])
            if not mine:
                continue
            color, marker = STYLE[config]
            x = [p["params"] * (1 + 0.03 * (i - 1.5)) for p in mine]  # side by side, not on top
            y = [p["tokens_per_sec"]["median"] for p in mine]
            err = [[v - p["tokens_per_sec"]["min"] for v, p in zip(y, mine)],
                   [p["tokens_per_sec"]["max"] - v for v, p in zip(y, mine)]]
            ax.errorbar(x, y, yerr=err, color=color, marker=marker, capsize=3, label=labels[config])
        if not any(p["scaling"] == scaling for p in pts):
            ax.text(0.5, 0.5, "not measured in this run", transform=ax.transAxes, ha="center")
        ax.set_yscale("log")
        tokens_axis(ax)
        size_axis(ax, sizes)
        ax.set_ylabel("tokens / second (all processes)")
        ax.set_title(titles[scaling], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=9)

    ax = axes[2]
    for config, scaling, style in ((TWO_PROCS, "weak", "-"), (TWO_PROCS, "strong", "--"),
                                   (PINNED, "weak", "-"), (PINNED, "strong", "--")):
        mine = sorted((p for p in pts if p["scaling"] == scaling and p["config"] == config),
                      key=lambda p: p["params"])
        if mine:
            color, marker = STYLE[config]
            ax.plot([p["params"] for p in mine], [100 * p["allreduce_share"] for p in mine], style,
                    color=color, marker=marker, label=f"{labels[config]}, {scaling}")
    size_axis(ax, sizes)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("comm hook (all-reduce), % of the step (medians)")
    ax.set_title("Communication share of a 2-process step", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    prov, load = results["provenance"], results["summary"]["load_average_1min"]
    busy = f"; load average {load[0]:.1f}-{load[1]:.1f} at the runs' starts (earlier runs count)" if load else ""
    fig.suptitle(f"When do 2 processes win? MiniGPT on {prov.cores} logical CPUs ({prov.cpu_model}), "
                 f"gloo; median of {plural(results['repeats'], 'repeat')}, bars: min-max{busy}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME, dpi=100)


def tokens_axis(ax: plt.Axes) -> None:
    """Readable ticks on a log axis of tokens/s: 1k, 2k, 5k, 10k, ... instead of a lone 10^4."""
    low, high = ax.get_ylim()
    ticks = [m * 10 ** e for e in range(2, 7) for m in (1, 2, 5) if low <= m * 10 ** e <= high]
    ax.set_yticks(ticks, [f"{t / 1000:g}k" for t in ticks])
    ax.minorticks_off()


def size_axis(ax: plt.Axes, sizes: list[int]) -> None:
    """A log x axis of model parameters, ticked at the measured sizes."""
    ax.set_xscale("log")
    ax.set_xticks(sizes, [params_label(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlim(sizes[0] / 1.25, sizes[-1] * 1.25)
    ax.set_xlabel("model parameters")


def options(p) -> None:
    p.add_argument("--repeats", type=positive_int, default=None, help=f"runs per point (default: {Plan.repeats})")


MEASUREMENT = Measurement("scaling_matrix", "When do 2 processes win? Threads, processes, pinning; weak and strong "
                          "scaling; model sizes", "08-when-two-processes-win.ipynb", (PLOT_NAME,), measure_matrix,
                          findings, plot_matrix, results_table, Plan.quick.__doc__, Plan, options=options)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
