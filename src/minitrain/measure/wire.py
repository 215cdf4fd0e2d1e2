"""The wire during training: DDP's gradient buckets, the bytes a step puts on the sockets, how
long the in-step all-reduce waits for the other rank, and the share of the step it costs.

    python -m minitrain.measure.wire [--out DIR] [--quick] [--bench allreduce_bench.json]

The driver starts this module under the lab's torchrun (2 ranks, loopback only). Each rank trains
the default MiniGPT as experiments/35-ddp-cpu/train.py does, with a comm hook that notes which
parameters each bucket holds and when its all-reduce starts and ends; it reads the kernel's byte
counters of the gloo connection between the ranks before and after the measured steps, times
steps with DDP's all-reduce against PyTorch's no-op hook, and profiles a few steps. The driver
turns both ranks' notes into wire.json, wire.png and trace-rank-{r}.json.gz.
"""

import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from minitrain.artifacts import save_figure
from minitrain.ddp import barrier
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.measure.allreduce import bench_option, benchmark_fit, predict_allreduce_ms, ring_factor, time_allreduce
from minitrain.measure.measurement import WORLD_SIZE, Measurement, relaunch
from minitrain.measure.sockets import gloo_pair_endpoints, my_connections, pair_bytes
from minitrain.measure.trace import load_trace, overlap_table, overlapped_share, profile_steps
from minitrain.model import MiniGPTConfig
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.rank import DDPRank, rebuilt_buckets
from minitrain.timing import summarize
from minitrain.train import TrainConfig

PLOT_NAME = "wire.png"
MiB = 2**20
GLOO_ALGORITHM = ("ring: ProcessGroupGloo's all-reduce calls gloo::allreduce without choosing an "
                  "algorithm, and gloo runs its ring (reduce-scatter, then all-gather) for any size")


@dataclass(frozen=True)
class Plan:
    """How many steps each phase of a rank's run takes."""

    warmup: int = 10  # DDP rebuilds its buckets after the first step; the rest settles the caches
    measured: int = 40  # socket bytes and in-step all-reduce times
    repeats: int = 5  # headroom: blocks of steps with the all-reduce, then with the no-op hook
    block: int = 12
    profiled: int = 3  # kept small: each step adds about 0.5 MB of trace
    bench_iters: int = 30  # stand-alone all-reduces of each bucket's size

    @classmethod
    def quick(cls) -> "Plan":
        """A few steps per phase: for tests and notebooks."""
        return cls(warmup=2, measured=4, repeats=2, block=2, profiled=1, bench_iters=3)


# ------------------------------------------------------------------------------------------------
# One rank


def worker(plan: Plan, corpus_dir: Path, work: Path, rank: int, world_size: int) -> dict:
    """One rank: warm up, bench each bucket alone, measure steps, headroom blocks, profile, save."""
    trainer = DDPRank(rank, world_size, corpus_dir)
    hook = trainer.hook
    trainer.steps(plan.warmup)
    buckets = [hook.buckets[i] for i in sorted(hook.buckets)]
    # the same bytes all-reduced alone, between barriers, in the same process group (ms per call)
    standalone = {b["bytes"]: [t * 1e3 for t in time_allreduce(b["bytes"], 3, plan.bench_iters, rank, world_size)]
                  for b in buckets}
    endpoints = gloo_pair_endpoints(my_connections())

    barrier()
    before = pair_bytes(endpoints)
    measured = trainer.steps(plan.measured)
    after = pair_bytes(endpoints)  # every all-reduce of those steps has completed on this rank

    blocks = []
    for repeat in range(plan.repeats):  # alternate which mode goes first, so drift cancels out
        for comm in ("allreduce", "noop") if repeat % 2 == 0 else ("noop", "allreduce"):
            hook.comm = comm
            barrier()  # without the all-reduce the ranks drift apart; start each block together
            blocks.append({"repeat": repeat, "comm": comm,
                           "step_ms": [r.step_ms for r in trainer.steps(plan.block)]})
    hook.comm = "allreduce"

    barrier()
    profile_steps(trainer.step, plan.profiled, work / f"trace-rank-{rank}.json.gz")
    ddp_sizes, ddp_order = rebuilt_buckets(trainer.ddp)  # DDP's own record of its (rebuilt) buckets
    return {
        "rank": rank, "world_size": world_size, "threads": torch.get_num_threads(),
        "plan": asdict(plan), "param_names": list(hook.names.values()),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in trainer.model.parameters()),
        "buckets": buckets, "standalone_ms": {str(k): v for k, v in standalone.items()},
        "pair_endpoints": endpoints, "bytes_before": before, "bytes_after": after,
        "events": [e for r in measured for e in r.events], "blocks": blocks,
        "ddp_bucket_sizes": ddp_sizes, "ddp_param_order": ddp_order,
    }


# ------------------------------------------------------------------------------------------------
# The driver: launch, combine both ranks' notes, write the results


def waits(notes: list[dict]) -> list[dict]:
    """Per step and rank: all-reduce ms from the bucket's ready to done, split into waiting (until
    the other rank's same bucket was ready too) and the rest (the transfer itself)."""
    ready = {(n["rank"], e["step"], e["bucket"]): e["ready"] for n in notes for e in n["events"]}
    rows = []
    for n in notes:
        per_step: dict[int, dict] = {}
        for e in n["events"]:
            both = max(ready[(r["rank"], e["step"], e["bucket"])] for r in notes)
            row = per_step.setdefault(e["step"], {"rank": n["rank"], "step": e["step"],
                                                  "allreduce_ms": 0.0, "waiting_ms": 0.0})
            row["allreduce_ms"] += (e["done"] - e["ready"]) * 1e3
            row["waiting_ms"] += (both - e["ready"]) * 1e3
        rows += per_step.values()
    for row in rows:
        row["transfer_ms"] = row["allreduce_ms"] - row["waiting_ms"]
    return rows


def analyse(notes: list[dict], fit: dict | None) -> dict:
    """wire.json's content (without provenance) from both ranks' notes and a benchmark's alpha-beta fit."""
    first = notes[0]
    n = first["world_size"]
    steps = first["plan"]["measured"]
    grad = first["gradient_bytes"]
    ring = ring_factor(n) * grad
    bucket_bytes = [b["bytes"] for b in first["buckets"]]

    if all(note["bytes_before"] and note["bytes_after"] for note in notes):
        delta = lambda key: [(nt["bytes_after"][key] - nt["bytes_before"][key]) / steps for nt in notes]  # noqa: E731
        sent, retransmitted, received = delta("sent"), delta("retransmitted"), delta("received")
        new_bytes = [s - r for s, r in zip(sent, retransmitted)]  # a retransmitted byte went out twice
        measured = {"source": "the kernel's tcp_info counters of gloo's pair sockets (ss -tin), "
                              "read inside each rank before and after the measured steps",
                    "sent_per_rank": new_bytes, "retransmitted_per_rank": retransmitted,
                    "received_per_rank": received, "sent_over_theory": statistics.fmean(new_bytes) / ring,
                    "pair_sockets_per_rank": [nt["pair_endpoints"] for nt in notes],
                    "overhead_bytes_per_step": statistics.fmean(new_bytes) - ring}
    else:
        measured = {"source": "not available on this OS (needs Linux's ss and /proc)",
                    "sent_per_rank": None, "retransmitted_per_rank": None, "received_per_rank": None,
                    "sent_over_theory": None, "overhead_bytes_per_step": None, "pair_sockets_per_rank": None}

    rows = waits(notes)
    standalone = [statistics.median(t for note in notes for t in note["standalone_ms"][str(b)])
                  for b in bucket_bytes]
    # Means, not medians: the waiting falls on whichever rank is faster, so half the rows are
    # near zero and a median over both ranks would hide it; means also add up (in-step =
    # waiting + transfer).
    mean = lambda key, rs=rows: statistics.fmean(r[key] for r in rs)  # noqa: E731
    predicted = sum(predict_allreduce_ms(b, fit) for b in bucket_bytes) if fit else None

    repeats = []
    for r in range(first["plan"]["repeats"]):
        block = {b["comm"]: statistics.median(b["step_ms"]) for b in first["blocks"] if b["repeat"] == r}
        repeats.append({"repeat": r, "step_ms_allreduce": block["allreduce"], "step_ms_noop": block["noop"],
                        "comm_share": 1 - block["noop"] / block["allreduce"]})

    names = first["param_names"]
    return {
        "config": {"world_size": n, "threads_per_rank": first["threads"], "batch_size_per_rank": TrainConfig.batch_size,
                   "block_size": TrainConfig.block_size, "n_layer": MiniGPTConfig.n_layer, "n_head": MiniGPTConfig.n_head,
                   "n_embd": MiniGPTConfig.n_embd, "plan": first["plan"]},
        "buckets": first["buckets"],  # index order = the order backward fills and launches them
        "ddp_buckets": {"sizes_bytes": first["ddp_bucket_sizes"],
                        "params_in_order": [names[i] for i in first["ddp_param_order"]],
                        "source": "DDP's logging data after its bucket rebuild (rebuilt_bucket_sizes, "
                                  "rebuilt_per_bucket_param_indices)"},
        "bytes_per_step": {"gradient": grad, "ring_theory_per_rank": ring,
                           "ring_formula": "2(n-1)/n x gradient bytes, sent by each rank",
                           "gloo_algorithm": GLOO_ALGORITHM, "measured": measured},
        "allreduce_ms": {
            "in_step": summarize([r["allreduce_ms"] for r in rows]),
            "waiting": summarize([r["waiting_ms"] for r in rows]),
            "transfer": summarize([r["transfer_ms"] for r in rows]),
            "standalone": sum(standalone), "standalone_per_bucket": standalone,
            "predicted": predicted,
            "in_step_over_standalone": statistics.median(r["allreduce_ms"] for r in rows) / sum(standalone),
            "waiting_share": mean("waiting_ms") / mean("allreduce_ms"),
            "per_rank": [{"rank": rank, "in_step_mean": mean("allreduce_ms", mine),
                          "waiting_mean": mean("waiting_ms", mine)}
                         for rank in range(n) if (mine := [r for r in rows if r["rank"] == rank])],
            "per_step": rows,
            "method": "per step and rank, summed over buckets. In-step: from a bucket's hook call (its "
                      "gradients ready) to its all-reduce done; waiting: until the other rank's same "
                      "bucket was ready too; transfer: the rest. In-step over stand-alone: median over "
                      "median; the waiting share: means over steps and ranks (means add up). "
                      "Stand-alone: median of the same bytes all-reduced between barriers in the same "
                      "process group; predicted: the benchmark's alpha-beta fit",
        },
        "headroom": {"repeats": repeats,
                     "step_ms_allreduce": statistics.median(r["step_ms_allreduce"] for r in repeats),
                     "step_ms_noop": statistics.median(r["step_ms_noop"] for r in repeats),
                     # paired design: each repeat's two adjacent blocks give one share; the median of those
                     "comm_share": statistics.median(r["comm_share"] for r in repeats),
                     "method": "rank 0's median step time per block, blocks alternating DDP's all-reduce "
                               "hook and PyTorch's noop_hook (train.py --comm noop) in the same processes; "
                               "comm_share: the median over repeats of each repeat's 1 - noop/allreduce"},
    }


def measure(out: Path, plan: Plan, corpus_dir: Path, echo, bench: Path | None = None) -> dict:
    """Both ranks' notes, then wire.json's content; the two traces into `out`.

    `bench`: a benchmark's results file whose alpha-beta fit predicts the all-reduce time."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        notes = relaunch(MEASUREMENT, plan, corpus_dir, work, timeout=600, echo=echo)
        traces = []
        for r in range(WORLD_SIZE):
            name = f"trace-rank-{r}.json.gz"
            shutil.move(work / name, out / name)
            traces.append({"file": name, "rows": overlap_table(load_trace(out / name))})
    fit, benchmark = benchmark_fit(bench)
    overlap_rows = [row | {"rank": r} for r, t in enumerate(traces) for row in t["rows"]]
    return analyse(notes, fit) | {
        "overlap": {"rows": overlap_rows, "overlapped_share": overlapped_share(overlap_rows),
                    "traces": [t["file"] for t in traces],
                    "open_with": "https://ui.perfetto.dev (Open trace file; .json.gz is read as is)"},
        "benchmark": benchmark}


def findings(results: dict) -> list[Finding]:
    """The headline numbers: buckets, bytes on the sockets against theory, time in the step, overlap."""
    buckets, wire, ar, head = (results["buckets"], results["bytes_per_step"], results["allreduce_ms"],
                               results["headroom"])
    measured = wire["measured"]
    records = [
        Finding("buckets", len(buckets), "buckets", f"DDP packs MiniGPT's {wire['gradient'] / MiB:.2f} MiB "
                "of gradients into this many all-reduces per step"),
        Finding("sent_over_ring_theory", measured["sent_over_theory"], "ratio",
                f"bytes each rank's gloo sockets sent per step against the ring's 2(n-1)/n x gradients "
                f"({wire['ring_theory_per_rank'] / MiB:.2f} MiB)" if measured["sent_per_rank"]
                else "socket counters are not available on this OS"),
        Finding("in_step_allreduce_median", ar["in_step"]["median"], "ms",
                "comm hook, bucket launch to completion, per step and rank (includes waiting for the peer)"),
        Finding("standalone_allreduce_median", ar["standalone"], "ms",
                "the same bytes all-reduced alone between barriers in the same process group (median per call)"),
        Finding("waiting_share", ar["waiting_share"], "fraction of the in-step all-reduce",
                "time a rank's bucket waited for the other rank's same bucket to be ready (means)"),
        Finding("comm_share", head["comm_share"], "fraction of the step",
                f"1 - step with the no-op hook / step with the all-reduce, the median over {len(head['repeats'])} "
                "alternating repeats of each repeat's share, from rank 0's median step per block (the no-op hook "
                "also removes the waiting)"),
    ]
    if "overlap" in results:
        records.append(Finding("overlapped_share", results["overlap"]["overlapped_share"],
                               "fraction of all-reduce time", "all-reduce time that ran while backward "
                               "was still computing (profiler trace)"))
    return records


def plot(results: dict, out: Path) -> None:
    """Bytes (theory vs sockets), all-reduce time (in-step vs alone vs fit), step with vs without."""

    import matplotlib.pyplot as plt

    wire, ar, head = results["bytes_per_step"], results["allreduce_ms"], results["headroom"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.6))

    sent = wire["measured"]["sent_per_rank"] or []
    labels = ["gradients", "ring theory\nper rank"] + [f"sent by\nrank {r}" for r in range(len(sent))]
    values = [wire["gradient"], wire["ring_theory_per_rank"], *sent]
    bars = ax1.bar(labels, [v / MiB for v in values], color=["0.6", "#4c72b0"] + ["#55a868"] * len(sent))
    ax1.bar_label(bars, labels=[f"{v:,.0f} B" for v in values], fontsize=7)
    if not sent:
        ax1.text(0.5, 0.5, "socket counters:\nnot available on this OS", transform=ax1.transAxes, ha="center")
    ax1.set_ylabel("MiB per step")
    ax1.set_title("Bytes per step: theory vs the sockets")

    # medians side by side; the split into waiting and transfer needs means, which add up
    ax2.bar(["in the step\n(median)"], [ar["in_step"]["median"]], color="#8172b2")
    ax2.bar(["alone, same\nbytes (median)"], [ar["standalone"]], color="#55a868")
    if ar["predicted"] is not None:
        ax2.bar(["alpha-beta\nfit"], [ar["predicted"]], color="0.6")
    transfer, waiting = ar["transfer"]["mean"], ar["waiting"]["mean"]
    ax2.bar(["in the step\n(mean, split)"], [waiting], color="#dd8452", label="until the other rank's hook fired (mean)")
    ax2.bar(["in the step\n(mean, split)"], [transfer], bottom=[waiting], color="#4c72b0",
            label="after both hooks fired: gloo start-up + transfer (mean)")
    ax2.set_ylabel("ms per step")
    ax2.tick_params(axis="x", labelsize=8)
    ax2.set_title(f"All-reduce: in the step {ar['in_step_over_standalone']:.1f}x alone (medians)")
    ax2.legend(fontsize=8, loc="upper right")
    ax2.set_ylim(0, 1.45 * max(ar["in_step"]["median"], ar["standalone"], waiting + transfer))

    for r in head["repeats"]:
        ax3.plot([0, 1], [r["step_ms_allreduce"], r["step_ms_noop"]], "o-", color="0.7")
    ax3.plot([0, 1], [head["step_ms_allreduce"], head["step_ms_noop"]], "o-", color="#c44e52", linewidth=2,
             label="median of repeats")
    ax3.set_xticks([0, 1], ["DDP all-reduce", "no-op hook"])
    ax3.set_xlim(-0.5, 1.5)
    ax3.set_ylim(0, 1.15 * max(r["step_ms_allreduce"] for r in head["repeats"]))
    ax3.set_ylabel("step time, ms (median of a block)")
    ax3.set_title(f"Communication: {head['comm_share']:.0%} of the step\n(median of the paired repeats' shares)")
    ax3.legend(fontsize=8)

    config, prov = results["config"], results["provenance"]
    fig.suptitle(f"The wire during training: {config['world_size']} gloo ranks, "
                 f"{plural(config['threads_per_rank'], 'thread')} each, {prov.cores} logical CPUs, torch {prov.torch}",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


def bucket_table(results: dict) -> str:
    """The buckets as text: index, bytes, and their parameters in the order backward filled them."""
    lines = []
    for b in results["buckets"]:
        lines.append(f"bucket {b['index']}: {b['bytes']:,} bytes, {len(b['params'])} tensors")
        lines += [f"  {name}" for name in b["params"]]
    return "\n".join(lines)


MEASUREMENT = Measurement("wire", "The wire during training: buckets, socket bytes, waiting, the share of the step",
                          "10-the-wire-during-training.ipynb", (PLOT_NAME,), measure, findings, plot, bucket_table,
                          Plan.quick.__doc__, Plan, worker, options=bench_option,
                          written=lambda results: results["overlap"]["traces"])
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
