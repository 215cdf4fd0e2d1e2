"""Negative controls and learning: is the all-reduce doing the work, and does DDP still learn?

    python -m minitrain.measure.control_runs [--out DIR] [--steps N] [--quick] [--corpus-dir DIR] [--runs-dir DIR]

Controls: three 2-process runs of train.py with --track-drift. With DDP's all-reduce the ranks
hold the same weights after every step; without it (every backward under no_sync(), or DDP's
no-op comm hook) each rank follows its own shard's gradients and the weights drift apart.
Learning: 1 process with batch 32 against 2 processes with batch 16 each, the same 2,048 tokens
per step; the DDP control run is the 2-process run. Writes control_runs.json,
control_runs_drift.png and control_runs_learning.png into --out (default experiments/35-ddp-cpu/beyond/).
"""

import argparse
import contextlib
import functools
import math
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt

from minitrain.artifacts import save_figure
from minitrain.cli import positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.runs import read_run
from minitrain.launch import run_ranks
from minitrain.measure.measurement import Measurement, fresh_folder, progress, runs_folder
from minitrain.measure.scoring import (GLOBAL_BATCH, QUICK_PAIRS, QUICK_VAL_BATCHES, VAL_BATCHES, final_metrics,
                                       one_thread_per_process, scoring_pairs)
from minitrain.paths import BEYOND_DIR, TRAIN_SCRIPT  # noqa: F401 (BEYOND_DIR: for the notebook)
from minitrain.train import TrainConfig

# train.py's flags for each 2-process drift case; "ddp" is the real thing, the others are controls
CASES = {"ddp": [], "no-sync": ["--no-sync"], "noop": ["--comm", "noop"]}
BLOCK_SIZE = TrainConfig.block_size
SMOOTH = 20  # steps in the moving average of the plotted training loss


@dataclass(frozen=True)
class Plan:
    """How many steps each run trains, and the scoring of the final weights."""

    steps: int = 300
    pairs: int | None = None  # minimal pairs scored (None: all)
    val_batches: int = VAL_BATCHES

    @classmethod
    def quick(cls) -> "Plan":
        """6 steps, 100 pairs: seconds, for tests."""
        return cls(steps=6, pairs=QUICK_PAIRS, val_batches=QUICK_VAL_BATCHES)


def run_case(name: str, nproc: int, steps: int, runs_dir: Path, corpus_dir: Path,
             extra: tuple[str, ...] = (), timeout: float | None = 900, echo=print) -> dict:
    """One real run of train.py under the lab's torchrun (run_ranks) into runs_dir/name: its run.json, timings, seconds."""
    folder = Path(runs_dir) / name
    echo(f"== {name}: {nproc} process(es) -> {folder}")
    start = time.perf_counter()
    run_ranks(TRAIN_SCRIPT, nproc, "--out", str(folder), "--steps", str(steps), "--warmup", "0", "--batch-size",
              str(GLOBAL_BATCH // nproc), "--block-size", str(BLOCK_SIZE), "--corpus-dir", str(corpus_dir), *extra,
              timeout=timeout, echo=echo)
    run, timings = read_run(folder)
    return {"run": run, "timings": timings, "seconds": time.perf_counter() - start}


def run_drift_controls(runs_dir: Path, steps: int, corpus_dir: Path = DEFAULT_CORPUS_DIR,
                       cases: tuple[str, ...] = tuple(CASES), timeout: float | None = 900) -> dict[str, dict]:
    """The 2-process drift runs (`cases` of CASES), each with --track-drift."""
    return {case: run_case(case, 2, steps, runs_dir, corpus_dir, (*CASES[case], "--track-drift"), timeout)
            for case in cases}


def drift_curve(case: dict) -> list[float]:
    """Largest |parameter difference| between the ranks after each step of a drift run."""
    return [r["max_param_diff"] for r in case["timings"]]


def measure(out: Path, plan: Plan, corpus_dir: Path, echo, steps: int | None = None,
            runs_dir: Path | None = None) -> dict:
    """The drift runs, the 1-process run and the weights scored: control_runs.json's content.
    `steps`: instead of the plan's; `runs_dir`: where the runs' files stay (default: runs_folder)."""
    plan = replace(plan, steps=steps) if steps else plan
    out, corpus_dir = Path(out).resolve(), Path(corpus_dir).resolve()
    steps, val_batches = plan.steps, plan.val_batches
    pairs = scoring_pairs(corpus_dir, plan.pairs)
    # 1 thread per process in every run, as torchrun gives each of 2 ranks: the 1-process run does
    # the same arithmetic per rank, and nothing crawls when other work holds the cores (idle
    # threads spin: on a busy machine 1 thread scored 100 pairs 20x faster than 2)
    with one_thread_per_process(), fresh_folder(runs_dir or runs_folder(out, MEASUREMENT.name)) as runs:
        runs, cases = runs.resolve(), {}
        jobs = [(case, 2, (*CASES[case], "--track-drift")) for case in CASES] + [("1proc", 1, ())]
        with progress(len(jobs), "runs") as bar:
            for case, nproc, extra in jobs:  # quiet logs: a failure raises with the run's last lines
                cases[case] = run_case(case, nproc, steps, runs, corpus_dir, extra, echo=lambda line: None)
                bar.write(f"{case}: {nproc} process(es), {cases[case]['seconds']:.0f} s")
                bar.update()
        print("== scoring the initial and final weights on val.jsonl and pairs.jsonl", flush=True)
        # each pair's outcome too: the two runs' accuracies are compared pair by pair (accuracy_test)
        metrics = {"before": final_metrics(None, corpus_dir, pairs, val_batches),
                   "1proc": final_metrics(runs / "1proc" / "state-rank-0.pt", corpus_dir, pairs, val_batches, True),
                   "2proc": final_metrics(runs / "ddp" / "state-rank-0.pt", corpus_dir, pairs, val_batches, True)}

    drift = {case: drift_curve(cases[case]) for case in CASES}
    learning = {label: {"nproc": cases[case]["run"].world_size,
                        "batch_size_per_rank": cases[case]["run"].batch_size_per_rank,
                        "threads_per_rank": cases[case]["run"].threads_per_rank,
                        "loss": [r["loss"] for r in cases[case]["timings"]],
                        **metrics[label]}
                for label, case in (("1proc", "1proc"), ("2proc", "ddp"))}
    results = {
        "steps": steps,
        "quick": plan == Plan.quick(),
        "global_batch": GLOBAL_BATCH,
        "block_size": BLOCK_SIZE,
        "lr": cases["ddp"]["run"].lr,
        "model_params": cases["ddp"]["run"].model_params,
        "drift": drift,
        "final_drift": {case: d[-1] for case, d in drift.items()},
        "ddp_drift_exactly_zero": all(d == 0.0 for d in drift["ddp"]),
        "noop_equals_no_sync": drift["noop"] == drift["no-sync"],
        "learning": learning | {"before": metrics["before"]},
        "loss_note": "training loss is the process's own batch loss: all 32 sequences for 1 process, "
                     "rank 0's 16 for 2 processes (the DDP gradient averages both ranks' losses)",
        "pairs": len(pairs),
        "val_batches": val_batches,
        "val_tokens": val_batches * GLOBAL_BATCH * BLOCK_SIZE,
        "commands": {case: c["run"].command for case, c in cases.items()},
        "runtime_s": {case: round(c["seconds"], 1) for case, c in cases.items()},
    }
    return results


def plot(results: dict, out: Path) -> None:
    """Both figures: the drift, and the learning."""
    plot_drift(results, out / "control_runs_drift.png")
    plot_learning(results, out / "control_runs_learning.png")


LOSS_TOLERANCE = 0.05  # nats of validation loss; well under what 100 more steps change it here
ALPHA = 0.05  # significance level of the paired accuracy test


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: b pairs only one model got right, c only the other."""
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n) if n else 1.0


@functools.lru_cache
def pairing_bounds(wins_a: int, wins_b: int, n: int) -> tuple[int, int, float, float]:
    """Over every way two models' wins on the same n pairs can overlap: the fewest and the most
    discordant pairs, and the lowest and the highest exact McNemar p-value."""
    gap, more, fewer = abs(wins_a - wins_b), max(wins_a, wins_b), min(wins_a, wins_b)
    # b pairs only the better model won, b - gap only the other: b from gap up to what n allows
    only_better = range(gap, min(more, n - fewer) + 1)
    p = [mcnemar_p(b, b - gap) for b in only_better]
    return gap, 2 * only_better[-1] - gap, min(p), max(p)


def accuracy_test(results: dict) -> tuple[bool | None, str]:
    """Do the two runs' accuracies on the same pairs differ (exact McNemar test, p < ALPHA)? None: the
    results cannot tell (no per-pair outcomes, and some pairings would differ, others not); and why."""
    one, two, n = results["learning"]["1proc"], results["learning"]["2proc"], results["pairs"]
    if "pair_outcomes" in one and "pair_outcomes" in two:
        b = sum(x > y for x, y in zip(one["pair_outcomes"], two["pair_outcomes"]))
        c = sum(x < y for x, y in zip(one["pair_outcomes"], two["pair_outcomes"]))
        p = mcnemar_p(b, c)
        return p < ALPHA, (f"{b} pairs right with 1 process only, {c} with 2 only: exact McNemar p = {p:.2g}, "
                           f"{'a' if p < ALPHA else 'no'} difference at {ALPHA}")
    fewest, most, low, high = pairing_bounds(round(one["accuracy"] * n), round(two["accuracy"] * n), n)
    pairing = (f"this run predates per-pair outcomes (the next sitting records them): {fewest} to {most} pairs may be "
               "right in one run only")
    if low >= ALPHA:
        return False, f"{pairing}; even {fewest} gives exact McNemar p = {low:.2g}: no difference under any pairing"
    if high < ALPHA:
        return True, f"{pairing}; even {most} gives exact McNemar p = {high:.2g}: a difference under every pairing"
    return None, f"{pairing}, p from {low:.2g} to {high:.2g}: the paired test needs the per-pair outcomes"


def learning_verdict(results: dict) -> str:
    """'same', 'better', 'worse' or 'different': 2 processes against 1, beyond the noise allowed;
    'undecided' when the answer hangs on an accuracy test the results cannot settle."""
    one, two = results["learning"]["1proc"], results["learning"]["2proc"]
    loss_gap, accuracy_gap = two["val_loss"] - one["val_loss"], two["accuracy"] - one["accuracy"]

    def verdict(accuracy_differs: bool) -> str:
        better = loss_gap <= -LOSS_TOLERANCE or (accuracy_differs and accuracy_gap > 0)
        worse = loss_gap >= LOSS_TOLERANCE or (accuracy_differs and accuracy_gap < 0)
        return "different" if better and worse else "better" if better else "worse" if worse else "same"

    differs = accuracy_test(results)[0]
    verdicts = {verdict(d) for d in ((True, False) if differs is None else (differs,))}
    return verdicts.pop() if len(verdicts) == 1 else "undecided"


def findings(results: dict) -> list[Finding]:
    """Drift with and without the all-reduce; learning of 2 DDP processes against 1, same global batch."""
    final, steps = results["final_drift"], results["steps"]
    one, two = results["learning"]["1proc"], results["learning"]["2proc"]
    verdict = learning_verdict(results)
    return [
        Finding("ddp_max_drift", max(results["drift"]["ddp"]), "largest |parameter difference|",
                f"rank 1 against rank 0 over {steps} steps with DDP's all-reduce"
                + (": exactly 0 at every step" if results["ddp_drift_exactly_zero"] else "")),
        Finding("no_sync_final_drift", final["no-sync"], "largest |parameter difference|",
                f"after {steps} steps under no_sync(), no all-reduce"
                + (" (the no-op comm hook: identical)" if results["noop_equals_no_sync"] else "")),
        Finding("val_loss_2proc_minus_1proc", two["val_loss"] - one["val_loss"], "nats",
                f"validation loss of 2 DDP processes minus 1 process on the same global batch "
                f"({two['val_loss']:.3f} against {one['val_loss']:.3f}); learning: {verdict} "
                f"(same: losses within {LOSS_TOLERANCE} nats, accuracies not different by an exact paired test at {ALPHA})"),
        Finding("accuracy_2proc_minus_1proc", two["accuracy"] - one["accuracy"], "minimal-pair accuracy",
                f"{two['accuracy']:.3f} against {one['accuracy']:.3f} on {results['pairs']} pairs"),
    ]


def what_ran(results: dict) -> str:
    """What the runs trained, for the provenance line."""
    return (f"{results['steps']} steps, {results['model_params']:,} parameters, {results['global_batch']} "
            f"sequences x {results['block_size']} tokens per step, lr {results['lr']:g}")


def drift_table(results: dict) -> str:
    """The largest |parameter difference| between the ranks after a few steps n, per case (0 printed
    as 0), and the no_sync() drift over n x 2 x lr."""
    drift, steps, lr = results["drift"], results["steps"], results["lr"]
    lines = [f"{'after step n':>12}  {'DDP':>5}  {'no_sync()':>10}  {'no-op hook':>10}  {'no_sync() / (n x 2 x lr)':>24}"]
    for step in sorted({1, 2, 10, steps // 2, steps} & set(range(1, steps + 1))):
        d = {case: drift[case][step - 1] for case in drift}
        ddp = f"{d['ddp']:.1e}" if d["ddp"] else "0"
        lines.append(f"{step:>12}  {ddp:>5}  {d['no-sync']:>10.1e}  {d['noop']:>10.1e}  "
                     f"{d['no-sync'] / (step * 2 * lr):>24.2f}")
    return "\n".join(lines)


def drift_checks(results: dict) -> str:
    """The control's verdicts: DDP exactly 0, the two controls identical."""
    return "\n".join([
        f"DDP: exactly 0 at every step: {results['ddp_drift_exactly_zero']}",
        f"no_sync() and the no-op hook drift identically, step by step: {results['noop_equals_no_sync']}"])


def learning_table(results: dict, last: int = SMOOTH) -> str:
    """Validation loss, minimal-pair accuracy and mean training loss over the last `last` steps:
    before training, 1 process, 2 DDP processes; the paired accuracy test and the verdict."""
    learning = results["learning"]
    lines = [f"{'':<22}{'val loss':>9}  {'accuracy':>8}  {f'train loss, last {last} steps':>26}"]
    for key, label in (("before", "before training"),
                       ("1proc", f"1 process x {learning['1proc']['batch_size_per_rank']}"),
                       ("2proc", f"2 processes x {learning['2proc']['batch_size_per_rank']}")):
        run = learning[key]
        train = f"{sum(run['loss'][-last:]) / len(run['loss'][-last:]):.3f}" if "loss" in run else "-"
        lines.append(f"{label:<22}{run['val_loss']:>9.3f}  {run['accuracy']:>8.3f}  {train:>26}")
    lines.append(f"({results['pairs']} pairs, {results['val_tokens']:,} validation tokens)")
    lines.append(f"accuracy, paired: {accuracy_test(results)[1]}")
    lines.append(f"learning verdict, 2 processes against 1: {learning_verdict(results)}")
    return "\n".join(lines)


def drift_growth(results: dict) -> str:
    """The no_sync() drift over n x 2 x lr at its highest, and what a value above 1 implies."""
    drift, lr = results["drift"]["no-sync"], results["lr"]
    ratios = [d / (n * 2 * lr) for n, d in enumerate(drift, 1)]
    top = max(range(len(ratios)), key=ratios.__getitem__)
    said = f"Highest no_sync() drift / (n x 2 x lr): {ratios[top]:.2f}, after step {top + 1}"
    # the gap after n steps is at most both ranks' moves summed (AdamW's decoupled decay only shrinks it):
    # above n x 2 x lr, some step moved a weight by more than lr
    # float32 rounding alone lifts the ratio a hair above 1 (1.0001 at step 1): only a clear excess says it
    return said + (": above 1, so some AdamW steps moved a weight by more than lr." if ratios[top] > 1.01
                   else ": never clearly above 1.")


def tolerance_text(compression: dict | None) -> str:
    """The loss tolerance, a setting, and how many seed spreads of notebook 12's plain runs it is, if measured."""
    spread = compression["seed_spread"] if compression else None
    if not spread or spread["val_loss"] is None:
        return f"the {LOSS_TOLERANCE}-nat tolerance (a setting, not a noise estimate of these runs)"
    return (f"the {LOSS_TOLERANCE}-nat tolerance (a setting: {LOSS_TOLERANCE / spread['val_loss']:.1f} x the seed "
            f"spread of notebook 12's {spread['runs']} plain runs)")


def takeaway(results: dict, compression: dict | None = None) -> str:
    """The notebook's takeaway, in sentences with this run's numbers and verdicts; `compression`:
    notebook 12's results, whose seed spread the loss tolerance is compared with."""
    drift, steps = results["drift"], results["steps"]
    one, two = results["learning"]["1proc"], results["learning"]["2proc"]
    ddp = (f"stayed exactly equal for all {steps} steps" if results["ddp_drift_exactly_zero"] else
           f"differed by up to {max(drift['ddp']):.1e}")
    controls = "`no_sync()` or the no-op hook: identical" if results["noop_equals_no_sync"] else (
        "`no_sync()`; the no-op hook drifted differently")
    caused = ("the equality of notebook 05 is the all-reduce's doing."
              if results["ddp_drift_exactly_zero"] and drift["no-sync"][-1] > 0 else
              "this control does not separate the all-reduce from the rest: see the drift table.")
    verdict = learning_verdict(results)
    rule = f"{tolerance_text(compression)} and the paired accuracy test"
    meaning = {"same": f"the same learning, within {rule}",
               "better": f"2 processes learned better, beyond {rule}",
               "worse": f"2 processes learned worse, beyond {rule}",
               "different": "different learning: one measure better, the other worse",
               "undecided": "undecided: the accuracy test needs per-pair outcomes"}[verdict]
    return "\n".join([
        f"- With DDP's all-reduce the ranks' weights {ddp}; without it ({controls}) they were "
        f"{drift['no-sync'][0]:.1e} apart after step 1 and {drift['no-sync'][-1]:.1e} after {steps}: {caused}",
        f"- Same global batch: validation loss {two['val_loss']:.3f} with 2 processes against {one['val_loss']:.3f} "
        f"with 1, accuracy {two['accuracy']:.3f} against {one['accuracy']:.3f}: {meaning}."])


class _Masked:
    """A text stream that writes to `stream` with every `old` replaced by `new`."""

    def __init__(self, stream, old: str, new: str) -> None:
        self.stream, self.old, self.new = stream, old, new

    def write(self, text: str) -> int:
        return self.stream.write(text.replace(self.old, self.new))

    def flush(self) -> None:
        self.stream.flush()


def live_drift(steps: int, timeout: float | None = 300, corpus_dir: Path = DEFAULT_CORPUS_DIR,
               cases: tuple[str, ...] = ("ddp", "no-sync")) -> dict[str, list[float]]:
    """Drift runs of `cases` for `steps` steps in a temporary folder, deleted afterwards; their logs
    stream as they come, the folder shown as DIR. Returns each case's drift per step."""
    import sys

    with tempfile.TemporaryDirectory(prefix="controls-live-") as tmp, \
            contextlib.redirect_stdout(_Masked(sys.stdout, tmp, "DIR")):
        runs = run_drift_controls(Path(tmp), steps, ensure_corpus(corpus_dir), cases, timeout)
    return {case: drift_curve(run) for case, run in runs.items()}


def live_checks(live: dict[str, list[float]]) -> dict[str, bool]:
    """The live control's verdicts, which hold on any machine under any load (show_checks shows them)."""
    return {"live DDP run, drift exactly 0 at every step": all(d == 0.0 for d in live["ddp"]),
            "live no_sync() run, drift above 0 and growing": 0 < live["no-sync"][0] < live["no-sync"][-1]}


def plot_drift(results: dict, path: Path) -> None:
    """control_runs_drift.png: largest parameter difference per step, log y; exact zeros at the bottom."""
    drift = results["drift"]
    positive = [d for curve in drift.values() for d in curve if d > 0]
    floor = min(positive) / 10 if positive else 1e-8  # log axes cannot show 0: draw it here
    steps = range(1, results["steps"] + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, drift["no-sync"], color="#c44e52", lw=2.5, label="no all-reduce: no_sync() every step")
    identical = " (identical)" if results["noop_equals_no_sync"] else ""
    ax.plot(steps, drift["noop"], color="#222222", ls="--", lw=1.2,
            label=f"no all-reduce: DDP no-op comm hook{identical}")
    ax.plot(steps, [d if d > 0 else floor for d in drift["ddp"]], color="#4c72b0", lw=2.5,
            label="DDP all-reduce")
    if results["ddp_drift_exactly_zero"]:
        ax.annotate("DDP: exactly 0 at every step (drawn at the bottom)", (results["steps"], floor),
                    xytext=(-6, 8), textcoords="offset points", ha="right", color="#4c72b0")
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor / 2)
    ax.set_xlabel("step")
    ax.set_ylabel("largest |parameter difference|, rank 1 vs rank 0")
    ax.set_title(f"Negative control: 2 processes, {results['global_batch'] // 2} sequences per rank, "
                 f"lr {results['lr']:g}", fontsize=10)
    ax.legend(loc="center right", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def moving_average(values: list[float], window: int) -> list[float]:
    """Mean of each full window of `window` consecutive values."""
    return [sum(values[i - window:i]) / window for i in range(window, len(values) + 1)]


def plot_learning(results: dict, path: Path) -> None:
    """control_runs_learning.png: training loss (smoothed) and validation loss; grammar accuracy."""
    runs = results["learning"]
    labels = {"1proc": f"1 process x {runs['1proc']['batch_size_per_rank']}",
              "2proc": f"2 processes x {runs['2proc']['batch_size_per_rank']} (DDP, rank 0's loss)"}
    # the 1-process curve wide and underneath: the DDP curve drawn on top leaves it visible
    style = {"1proc": {"color": "#55a868", "lw": 4, "marker": "o", "ms": 12},
             "2proc": {"color": "#4c72b0", "lw": 1.5, "marker": "D", "ms": 6}}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    for key in ("1proc", "2proc"):
        loss, color = runs[key]["loss"], style[key]["color"]
        window = min(SMOOTH, len(loss))
        ax1.plot(range(1, len(loss) + 1), loss, color=color, alpha=0.25, lw=0.8)
        centers = [i - (window - 1) / 2 for i in range(window, len(loss) + 1)]  # no lag
        ax1.plot(centers, moving_average(loss, window), color=color,
                 lw=style[key]["lw"], label=f"{labels[key]}: train ({window}-step mean)")
        # both after the last step; the 1-process mark larger, so the DDP one on top leaves it visible
        ax1.plot([len(loss)], [runs[key]["val_loss"]], style[key]["marker"], color=color, ms=style[key]["ms"],
                 label=f"val loss after step {len(loss)}: {runs[key]['val_loss']:.3f}")
    ax1.set_xlabel("step")
    ax1.set_ylabel("cross-entropy loss (nats)")
    ax1.set_title(f"Same global batch: {results['global_batch']} x {results['block_size']} tokens per step")
    ax1.legend(fontsize=8)

    names = ["before", "1proc", "2proc"]
    values = [runs[k]["accuracy"] for k in names]
    bars = ax2.bar(["before\ntraining", "1 process", "2 processes\n(DDP)"], values,
                   color=["#999999", style["1proc"]["color"], style["2proc"]["color"]], width=0.6)
    ax2.bar_label(bars, [f"{v:.3f}" for v in values], fontsize=9)
    ax2.axhline(0.5, color="black", ls=":", lw=1, label="chance")
    ax2.legend(loc="upper left", fontsize=8)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("minimal-pair accuracy")
    ax2.set_title(f"Grammar probe, {results['pairs']} pairs")
    fig.tight_layout()
    save_figure(fig, path)


def steps_option(text: str) -> int:
    """--steps: at least 2 (the drift table reads the first and the last step)."""
    steps = positive_int(text)
    if steps < 2:
        raise argparse.ArgumentTypeError(f"--steps must be at least 2, got {steps}")
    return steps


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=steps_option, default=None, help=f"steps per run (default: {Plan.steps})")
    p.add_argument("--runs-dir", type=Path, default=None,
                   help="keep the runs' files here (default: build/control_runs/, or beside --out)")


MEASUREMENT = Measurement("control_runs", "Negative controls (drift without the all-reduce) and learning under DDP "
                          "against 1 process", "09-controls-and-learning.ipynb",
                          ("control_runs_drift.png", "control_runs_learning.png"), measure, findings, plot,
                          learning_table, Plan.quick.__doc__, Plan, options=options)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
