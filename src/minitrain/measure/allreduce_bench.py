"""Beyond the sheet: gloo's all-reduce between 2 local processes on its own, against raw loopback TCP.

    python -m minitrain.measure.allreduce_bench              # all 15 sizes, at most 2 GiB moved per size
    python -m minitrain.measure.allreduce_bench --quick --out build/bench   # a few seconds

Two gloo ranks all-reduce float32 tensors from 4 KiB to 64 MiB; per size: median and p95 time,
algorithm and bus bandwidth, then a latency-bandwidth fit t(s) = alpha + s * beta (s: message bytes). The same two
processes then stream bytes one way over a plain 127.0.0.1 socket: the physical reference.
Writes allreduce_bench.json and allreduce_bench.png (default: experiments/35-ddp-cpu/beyond/).
"""

import json
import math
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np

from minitrain.artifacts import save_figure
from minitrain.cli import positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.launch import spawn_workers
from minitrain.measure.allreduce import predict_allreduce_ms, ring_factor
from minitrain.measure.allreduce_ranks import KiB, MiB, Plan, bench_worker, iterations
from minitrain.measure.measurement import WORLD_SIZE, Measurement
from minitrain.model import count_parameters
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.timing import summarize
from minitrain.train import TrainConfig, build_model_for_corpus

PLOT_NAME = "allreduce_bench.png"
TIMING = ("per iteration, the slower rank's time from a shared barrier to its all_reduce returning "
          "(max over ranks): the collective is done only when every rank holds the sum")


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth for all-reduce: algbw times the ring factor 2(n-1)/n.

    https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md
    """
    return algbw * ring_factor(world_size)


def ring_allreduce(inputs: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
    """A ring all-reduce simulated in plain numpy: every rank's result and the values each rank sent.

    Each rank's vector is cut into n chunks. Reduce-scatter: in each of n-1 steps every rank sends
    one chunk to its right neighbour, which adds it to its own; then rank r holds the full sum of
    chunk r+1. All-gather: n-1 more steps pass the finished chunks around the ring.
    """
    n = len(inputs)
    data = [np.array(x, dtype=float) for x in inputs]
    chunks = np.array_split(np.arange(len(data[0])), n)  # indices of each chunk
    sent = [0] * n
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            # every rank sends at once: read all outgoing chunks before anyone writes
            first = 0 if phase == "reduce-scatter" else 1  # all-gather starts from the finished chunk
            outgoing = [(r, chunks[(r + first - step) % n]) for r in range(n)]
            values = [data[r][idx].copy() for r, idx in outgoing]
            for (r, idx), v in zip(outgoing, values):
                right = data[(r + 1) % n]
                right[idx] = right[idx] + v if phase == "reduce-scatter" else v
                sent[r] += len(idx)
    return data, sent


def fit_alpha_beta(sizes_bytes: list[int], seconds: list[float]) -> dict[str, float]:
    """Least-squares fit of t(s) = alpha + s * beta (s: message bytes); alpha in ms, beta as 1/beta in GB/s.

    Residuals are relative (each row divided by its t): plain least squares would fit only the
    largest sizes, which are 10,000x longer, and leave alpha as noise. A fixed cost is not negative:
    when the best line has alpha < 0, alpha is 0 and beta alone is fitted.
    """
    n, t = np.asarray(sizes_bytes, dtype=float), np.asarray(seconds, dtype=float)
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    return {"alpha_ms": alpha * 1e3, "beta_ns_per_byte": beta * 1e9, "bandwidth_gbps": 1 / beta / 1e9}


def crossover_bytes(fit: dict) -> float:
    """The message size where the fit's fixed cost and its cost for the bytes are equal: alpha / beta."""
    return fit["alpha_ms"] / fit["beta_ns_per_byte"] * 1e6


def loopback_share(result: dict) -> float:
    """All ranks' sends together at the largest size (world size x busbw) over one raw TCP stream: like for
    like, since on one host every rank's traffic crosses the same loopback at once."""
    return result["world_size"] * result["results"][-1]["busbw_gbps"] / result["loopback"]["median_gbps"]


def _ranks(n: int) -> str:
    """'both' for 2 ranks, else 'all n'."""
    return "both" if n == 2 else f"all {n}"


# ------------------------------------------------------------------------------------------------
# Results


def minigpt_gradient_bytes(corpus_dir: Path = DEFAULT_CORPUS_DIR,
                           block_size: int = TrainConfig.block_size) -> tuple[int, int]:
    """(parameters, float32 gradient bytes) of the lab's default MiniGPT: what DDP all-reduces per step."""
    model, _ = build_model_for_corpus(ensure_corpus(corpus_dir), block_size)
    params = count_parameters(model)
    return params, params * 4


def summarize_run(raw: dict, gradient_params: int, gradient_bytes: int) -> dict:
    """The result file's content: per-size statistics, bandwidths, the fit, loopback."""
    rows = []
    for nbytes, iters, times in zip(raw["sizes"], raw["iterations"], raw["times_s"]):
        stats = summarize([t * 1e3 for t in times])
        algbw = nbytes / (stats["median"] / 1e3) / 1e9
        rows.append({"bytes": nbytes, "iterations": iters,
                     "median_ms": stats["median"], "p95_ms": stats["p95"], "mean_ms": stats["mean"],
                     "algbw_gbps": algbw, "busbw_gbps": bus_bandwidth(algbw, WORLD_SIZE)})
    fit = fit_alpha_beta([r["bytes"] for r in rows], [r["median_ms"] / 1e3 for r in rows])
    loopback = summarize(raw["loopback_gbps"])
    return {
        "world_size": WORLD_SIZE,
        "backend": "gloo",
        "dtype": "float32",
        "op": "sum",
        "timing": TIMING,
        "warmup_iterations": raw["warmup"],
        "threads_per_rank": raw["threads_per_rank"],
        "result_checked": "every element of every iteration equals the expected sum",
        "sizes_bytes": [r["bytes"] for r in rows],
        "results": rows,
        "fit": fit | {"method": "least squares on the medians, relative residuals",
                      "max_relative_error": max(abs(predict_allreduce_ms(r["bytes"], fit) / r["median_ms"] - 1)
                                                for r in rows)},
        "loopback": {"bytes": raw["loopback_bytes"], "repeats": len(raw["loopback_gbps"]),
                     "median_gbps": loopback["median"], "gbps": raw["loopback_gbps"],
                     "method": "one TCP stream over 127.0.0.1 between the same two processes, one way"},
        "gradient": {"model_params": gradient_params, "bytes": gradient_bytes,
                     "predicted_allreduce_ms": predict_allreduce_ms(gradient_bytes, fit)},
    }


def size_label(nbytes: float) -> str:
    """4096 -> '4 KiB', 67108864 -> '64 MiB', 3 significant digits."""
    return f"{nbytes / MiB:.3g} MiB" if nbytes >= MiB else f"{nbytes / KiB:.3g} KiB"


def plot(result: dict, out: Path) -> None:
    """Time against size (log-log, with the fit) and bandwidth against size (with loopback TCP)."""

    import matplotlib.pyplot as plt

    rows, fit, grad = result["results"], result["fit"], result["gradient"]
    sizes = np.array([r["bytes"] for r in rows], dtype=float)
    line = np.geomspace(sizes[0], sizes[-1], 100)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))

    ax1.plot(sizes, [r["median_ms"] for r in rows], "o", color="#4c72b0", label="median")
    ax1.plot(sizes, [r["p95_ms"] for r in rows], "_", color="#4c72b0", markersize=10, label="p95")
    ax1.plot(line, [predict_allreduce_ms(n, fit) for n in line], "--", color="0.3",
             label=f"fit: {fit['alpha_ms']:.3f} ms + s / {fit['bandwidth_gbps']:.2f} GB/s (s: message bytes)")
    if fit["alpha_ms"] > 0:
        ax1.axvline(crossover_bytes(fit), color="0.3", linestyle=":", linewidth=1,
                    label=f"alpha = s x beta at {size_label(crossover_bytes(fit))}")
    ax1.set_yscale("log")
    ax1.set_ylabel("time per all-reduce (ms)")
    ax1.set_title("Time: flat (latency, alpha), then linear (bandwidth, beta)")

    n = result["world_size"]
    if ring_factor(n) == 1:  # the two series coincide: draw one
        ax2.plot(sizes, [r["algbw_gbps"] for r in rows], "o-", color="#4c72b0",
                 label=f"algbw = busbw: bytes / time (2(n-1)/n = 1 for n = {n})")
    else:
        ax2.plot(sizes, [r["algbw_gbps"] for r in rows], "o-", color="#4c72b0", label="algbw = bytes / time")
        ax2.plot(sizes, [r["busbw_gbps"] for r in rows], "x:", color="#c44e52", label="busbw = algbw x 2(n-1)/n")
    together = [n * r["busbw_gbps"] for r in rows]
    ax2.plot(sizes, together, "s--", color="#8172b2", markersize=4,
             label=f"{_ranks(n)} ranks' sends together: {n} x busbw")
    ax2.axhline(result["loopback"]["median_gbps"], color="#55a868",
                label=f"raw loopback TCP, one stream one way: {result['loopback']['median_gbps']:.2f} GB/s")
    ax2.set_ylabel("GB/s (1 GB = 1e9 bytes)")
    ax2.set_ylim(0, 1.2 * max(result["loopback"]["median_gbps"], *together))
    ax2.set_title("Bandwidth: what the time means per byte")

    ticks = [n for n in 4.0 ** np.arange(6, 14) if sizes[0] <= n <= sizes[-1]]  # 4 KiB, 16 KiB, ...
    for ax, where in ((ax1, "upper left"), (ax2, "center left")):  # where no data point lies
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [size_label(n) for n in ticks], fontsize=8)
        ax.set_xlabel("message size (float32 tensor per rank)")
        ax.axvline(grad["bytes"], color="#dd8452", linewidth=1.5,
                   label=f"MiniGPT gradients: {grad['bytes'] / MiB:.2f} MiB "
                         f"(fit: {grad['predicted_allreduce_ms']:.2f} ms)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc=where)
    p = result["provenance"]
    fig.suptitle(f"gloo all-reduce, {result['world_size']} processes on {p.cores} logical CPUs of "
                 f"{p.cpu_model}, torch {p.torch}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


def measure(out: Path, plan: Plan, corpus_dir: Path, echo, gradient_bytes: int | None = None) -> dict:
    """Both ranks' timings, summarized; `gradient_bytes`: the message to mark (default: MiniGPT's gradients)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw_path = Path(tmp) / "raw.json"
        spawn_workers(bench_worker, WORLD_SIZE, plan, str(raw_path))
        raw = json.loads(raw_path.read_text())
    params, nbytes = minigpt_gradient_bytes() if gradient_bytes is None else (gradient_bytes // 4, gradient_bytes)
    return summarize_run(raw, params, nbytes)


def report(result: dict) -> str:
    """A plain-text table of the results, then the fit, loopback and gradient lines."""
    lines = [f"{'size':>8}  {'iters':>5}  {'median ms':>9}  {'p95 ms':>8}  {'algbw GB/s':>10}  {'busbw GB/s':>10}"]
    for r in result["results"]:
        lines.append(f"{size_label(r['bytes']):>8}  {r['iterations']:>5}  {r['median_ms']:9.3f}  "
                     f"{r['p95_ms']:8.3f}  {r['algbw_gbps']:10.3f}  {r['busbw_gbps']:10.3f}")
    fit, grad = result["fit"], result["gradient"]
    lines += [f"fit: alpha {fit['alpha_ms']:.3f} ms, 1/beta {fit['bandwidth_gbps']:.2f} GB/s; it misses these "
              f"medians by up to {fit['max_relative_error']:.0%}",
              f"raw loopback TCP, one stream one way: {result['loopback']['median_gbps']:.2f} GB/s (median of "
              f"{result['loopback']['repeats']} x {size_label(result['loopback']['bytes'])})",
              f"MiniGPT gradients: {grad['model_params']:,} parameters = {grad['bytes']:,} bytes "
              f"({grad['bytes'] / MiB:.2f} MiB); the fit's time for them {grad['predicted_allreduce_ms']:.2f} ms"]
    return "\n".join(lines)


def ring_demo(ranks: list[int], length: int) -> str:
    """For each number of ranks, `ring_allreduce` on small integer vectors: does every rank end with
    the sum, and what share of the vector did each rank send, against 2(n-1)/n? One line each."""
    lines = []
    for n in ranks:
        inputs = [np.arange(length) + 100 * rank for rank in range(n)]
        results, sent = ring_allreduce(inputs)
        correct = all(np.array_equal(result, sum(inputs)) for result in results)
        count = str(sent[0]) if len(set(sent)) == 1 else "/".join(map(str, sent))
        lines.append(f"{n} ranks: every rank holds the sum: {correct}; each rank sent {count} of {length} "
                     f"values = {max(sent) / length:.3f} of the vector; 2(n-1)/n = {ring_factor(n):.3f}")
    return "\n".join(lines)


def benchmark_plan(gradient_params: int, gradient_bytes: int) -> str:
    """The full benchmark's plan (sizes, timed and warm-up iterations) and the gradient message it marks."""
    full = Plan()
    return "\n".join([
        "sizes: " + ", ".join(size_label(n) for n in full.sizes),
        f"timed iterations per size: {[iterations(n) for n in full.sizes]}",
        f"warm-up iterations per size: {full.warmup}",
        f"MiniGPT (default configuration, block size 64): {gradient_params:,} parameters -> "
        f"{gradient_bytes:,} bytes of float32 gradients ({gradient_bytes / MiB:.2f} MiB)"])


def result_checks(result: dict, gradient_bytes: int | None = None) -> dict[str, bool]:
    """Facts about a benchmark's results that do not depend on timing: the plan, the statistics'
    order, the bus-bandwidth arithmetic, the checked sums, the loopback run and, given
    `gradient_bytes`, whether the gradient mark is that size."""
    rows, n, sizes = result["results"], result["world_size"], tuple(result["sizes_bytes"])
    plan = "the full plan" if sizes == Plan().sizes else "the quick plan" if sizes == Plan.quick().sizes else None
    checks = {f"sizes measured are {plan or 'a known plan'}: " + ", ".join(size_label(b) for b in sizes): bool(plan),
              "every median positive and every p95 >= its median": all(0 < r["median_ms"] <= r["p95_ms"] for r in rows),
              f"busbw == algbw x 2(n-1)/n with n = {n}": all(r["busbw_gbps"] == r["algbw_gbps"] * ring_factor(n)
                                                           for r in rows),
              f"all-reduce results: {result['result_checked']}": True,  # the workers raise on a wrong sum
              "loopback TCP measured": result["loopback"]["median_gbps"] > 0}
    if gradient_bytes is not None:
        checks[f"its gradient mark is this MiniGPT's gradients ({gradient_bytes:,} bytes)"] = (
            result["gradient"]["bytes"] == gradient_bytes)
    return checks


def what_ran(result: dict) -> str:
    """The threads per rank of the benchmark, for its provenance line."""
    return f"2 ranks x {plural(result['threads_per_rank'], 'thread')}"


def findings(result: dict) -> list[Finding]:
    """The headline numbers: latency, bandwidth, where they cost the same, the gradients' regime, loopback."""
    fit, grad, loopback = result["fit"], result["gradient"], result["loopback"]["median_gbps"]
    crossover = crossover_bytes(fit)
    largest, n = result["results"][-1], result["world_size"]
    regime = "latency-bound" if grad["bytes"] < crossover else "bandwidth-bound"
    return [
        Finding("alpha", fit["alpha_ms"], "ms", "fixed cost of one all-reduce between the 2 processes "
                "(alpha-beta fit to this run's medians)"),
        Finding("bandwidth", fit["bandwidth_gbps"], "GB/s", "1/beta: the cost per byte, past the fixed cost"),
        Finding("crossover", crossover, "bytes", f"latency and bandwidth cost the same at "
                f"{size_label(crossover)}: smaller messages are latency-bound"),
        Finding("gradient_allreduce_predicted", grad["predicted_allreduce_ms"], "ms",
                f"the fit's time for MiniGPT's {grad['bytes'] / MiB:.2f} MiB of gradients in one all-reduce: "
                f"{regime}, {fit['alpha_ms'] / grad['predicted_allreduce_ms']:.0%} of it latency (this run's line, "
                "not a forecast for another run)"),
        Finding("traffic_over_loopback", loopback_share(result), "ratio",
                f"{_ranks(n)} ranks' sends together at {size_label(largest['bytes'])} ({n} x bus bandwidth) against "
                f"one raw TCP stream, one way over loopback ({loopback:.2f} GB/s), between the same processes"),
    ]


def fit_misses(result: dict) -> list[tuple[float, dict]]:
    """(relative miss, row) of every size, the fit's worst miss first, as `max_relative_error` counts it:
    fit / median - 1, above 0 when the median lies under the fit."""
    misses = [(predict_allreduce_ms(r["bytes"], result["fit"]) / r["median_ms"] - 1, r) for r in result["results"]]
    return sorted(misses, key=lambda m: -abs(m[0]))


def slow_tail(result: dict, times: float = 4) -> list[dict]:
    """The sizes whose p95 is at least `times` their median: a few iterations much slower than the rest."""
    return [r for r in result["results"] if r["p95_ms"] >= times * r["median_ms"]]


def reading(result: dict) -> str:
    """The notebook's reading of the figure, in sentences with this run's numbers."""
    fit, rows = result["fit"], result["results"]
    worst, row = fit_misses(result)[0]
    left = (f"Left: the fit's two costs are equal at {size_label(crossover_bytes(fit))} (dotted line); smaller "
            "messages pay mostly the fixed cost." if fit["alpha_ms"] > 0 else
            "Left: the fit found no fixed cost above 0, so its line is bandwidth alone.")
    text = [left + f" The line misses this run's medians by at most {abs(worst):.0%} (at {size_label(row['bytes'])}, "
            f"median {'below' if worst > 0 else 'above'} it): how well a line describes this run, not how well it "
            "predicts another (next section)."]
    tail = slow_tail(result)
    if tail:
        ratios = [r["p95_ms"] / r["median_ms"] for r in tail]
        first, last = rows.index(tail[0]), rows.index(tail[-1])
        where = (f"{size_label(tail[0]['bytes'])} to {size_label(tail[-1]['bytes'])}" if last - first + 1 == len(tail)
                 else ", ".join(size_label(r["bytes"]) for r in tail))
        text.append(f"At {len(tail)} of the {len(rows)} sizes ({where}) the p95 is {min(ratios):.0f} to "
                    f"{max(ratios):.0f} times the median: a tail of slow iterations, which the medians, and the fit "
                    "on them, leave out.")
    else:
        text.append("At every size the p95 stays under 4 times the median: no group of much slower iterations.")
    best, largest, n = max(rows, key=lambda r: r["algbw_gbps"]), rows[-1], result["world_size"]
    peak = "" if best is largest else f"the highest algbw, {best['algbw_gbps']:.2f} GB/s, came at {size_label(best['bytes'])}; "
    text.append(f"Right: {peak}at {size_label(largest['bytes'])} each rank sent {largest['busbw_gbps']:.2f} GB/s (busbw), "
                f"{_ranks(n)} at once: {n * largest['busbw_gbps']:.2f} GB/s through loopback, {_against_stream(result)}.")
    return "\n\n".join(text)


def _against_stream(result: dict, short: bool = False) -> str:
    """All ranks' sends at the largest size against one raw stream's median, and against its fastest and slowest
    repeat (`short`: without the stream's own numbers)."""
    loop, together = result["loopback"], result["world_size"] * result["results"][-1]["busbw_gbps"]
    span = f"{together / max(loop['gbps']):.0%}-{together / min(loop['gbps']):.0%} of its fastest and slowest"
    return (f"{loopback_share(result):.0%} of one raw TCP stream's median, one way ("
            + (span if short else f"{loop['median_gbps']:.2f} GB/s of {loop['repeats']} repeats; {span}") + ")")


def _apart(first: str, second: str) -> str:
    """How long after the ISO time `first` the ISO time `second` was recorded: '16 s later', '3 hours earlier'."""
    seconds = (datetime.fromisoformat(second) - datetime.fromisoformat(first)).total_seconds()
    gap = abs(seconds)
    span = (f"{gap:.0f} s" if gap < 120 else f"{gap / 60:.0f} minutes" if gap < 7200 else
            f"{gap / 3600:.0f} hours" if gap < 172800 else f"{gap / 86400:.0f} days")
    return f"{span} {'later' if seconds >= 0 else 'earlier'}"


def _when(date: str) -> str:
    """An ISO time to the second, readable: '2026-12-02 00:35:31+00:00'."""
    return datetime.fromisoformat(date).isoformat(sep=" ", timespec="seconds")


def against_another_run(result: dict, wire: dict) -> str:
    """The fit's time for the gradients beside this benchmark's medians at the nearest sizes measured and notebook
    10's stand-alone timing of the same all-reduces (wire.json): a markdown table, each row a sum over the buckets,
    and one sentence on how far apart the fit and the medians, then the two runs, are."""
    buckets, grad = [b["bytes"] for b in wire["buckets"]], result["gradient"]["bytes"]
    if sum(buckets) != grad:
        return f"Notebook 10's run all-reduced {sum(buckets):,} bytes, not these {grad:,}: nothing to compare."
    fit = lambda sizes: sum(predict_allreduce_ms(b, result["fit"]) for b in sizes)  # noqa: E731
    nearest = [min(result["results"], key=lambda r: abs(math.log(r["bytes"] / b))) for b in buckets]
    sizes = [r["bytes"] for r in nearest]
    median = sum(r["median_ms"] for r in nearest)
    alone = wire["allreduce_ms"]["standalone"]
    ours, theirs = result["provenance"], wire["provenance"]
    one = len(buckets) == 1
    calls = "one all-reduce" if one else f"{len(buckets)} all-reduces, one per DDP bucket (each row sums them)"
    at = (f"at {size_label(sizes[0])}, the nearest size measured" if one else
          f"at the nearest sizes measured ({', '.join(size_label(b) for b in sizes)})")
    table = [f"| {grad:,} bytes ({grad / MiB:.2f} MiB) in {calls} | ms | recorded |", "|---|---|---|",
             f"| this benchmark's fit for these bytes | {fit(buckets):.2f} | {_when(ours.date)} |",
             f"| this benchmark's fit {at} | {fit(sizes):.2f} | {_when(ours.date)} |",
             f"| this benchmark's median {at} | {median:.2f} | {_when(ours.date)} |",
             f"| notebook 10: the same bytes alone, between barriers (median) | {alone:.2f} | {_when(theirs.date)} |"]
    when = (f"recorded {_apart(ours.date, theirs.date)} "
            f"{'in the same sitting' if ours.sitting == theirs.sitting else 'in another sitting'}")
    miss = fit(sizes) / median - 1  # the line against the medians, at the same sizes
    diff = alone / median - 1  # run against run, not against the line
    line = (f"At {'that size' if one else 'those sizes'} the fit is {abs(miss):.0%} {'above' if miss > 0 else 'below'} "
            "this benchmark's median. ")
    sentence = line + (f"Notebook 10's run of these bytes, {when}, agrees with that median within 5%." if abs(diff) < 0.05 else
                       f"Notebook 10's run of these bytes, {when}, took {abs(diff):.0%} {'less' if diff < 0 else 'more'} "
                       "than that median: two runs of one all-reduce can differ by that much, so neither the fit nor "
                       "one run prices the next.")
    return "\n".join(table) + "\n\n" + sentence


def takeaway(result: dict) -> str:
    """The notebook's takeaway, in sentences with this run's numbers."""
    fit, grad, n = result["fit"], result["gradient"], result["world_size"]
    crossover = crossover_bytes(fit)
    side = "past" if grad["bytes"] > crossover else "below"
    return "\n".join([
        (f"- One all-reduce cost a fixed alpha = {fit['alpha_ms']:.3f} ms, then about {fit['bandwidth_gbps']:.2f} GB/s "
         f"(1/beta); the two are equal at {size_label(crossover)}." if fit["alpha_ms"] > 0 else
         f"- The fit found no fixed cost above 0; one all-reduce moved about {fit['bandwidth_gbps']:.2f} GB/s (1/beta)."),
        f"- MiniGPT's {grad['bytes'] / MiB:.2f} MiB of gradients lie {side} that crossover: this run's line gives "
        f"{grad['predicted_allreduce_ms']:.2f} ms, {fit['alpha_ms'] / grad['predicted_allreduce_ms']:.0%} of it latency; "
        "notebook 10's run of the same bytes is in the table above.",
        f"- At {size_label(result['results'][-1]['bytes'])} {_ranks(n)} ranks together pushed "
        f"{n * result['results'][-1]['busbw_gbps']:.2f} GB/s through loopback, {_against_stream(result, short=True)}."])


def options(p) -> None:
    p.add_argument("--gradient-bytes", type=positive_int, default=None,
                   help="message size to mark and predict (default: the default MiniGPT's gradients)")


MEASUREMENT = Measurement("allreduce_bench", "gloo's all-reduce between 2 local processes, against raw loopback TCP",
                          "07-allreduce-benchmark.ipynb", (PLOT_NAME,), measure, findings, plot, report,
                          Plan.quick.__doc__, Plan, options=options, corpus=False)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
