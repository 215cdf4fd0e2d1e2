"""The wire during training: DDP's gradient buckets, the bytes a step puts on the sockets, how
long the in-step all-reduce waits for the other rank, and the share of the step it costs.

    python -m minitrain.wire [--out DIR] [--quick]

The driver starts this file under the lab's torchrun (2 ranks, loopback only). Each rank trains
the default MiniGPT as experiments/35-ddp-cpu/train.py does, with a comm hook that notes which
parameters each bucket holds and when its all-reduce starts and ends; it reads the kernel's byte
counters of the gloo connection between the ranks before and after the measured steps, times
steps with DDP's all-reduce against PyTorch's no-op hook, and profiles a few steps. The driver
turns both ranks' notes into wire.json, wire.png and trace-rank-{r}.json.gz.
"""

import sys
from pathlib import Path

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    # Started as a script (torchrun takes a file path): the package folder must not act as a
    # top-level import folder, or its modules (data, model, trace, ...) could shadow others.
    del sys.path[0]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.autograd.profiler import record_function  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks  # noqa: E402

from minitrain import allreduce_bench  # noqa: E402
from minitrain.artifacts import BEYOND_DIR, save_figure, write_json  # noqa: E402
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus  # noqa: E402
from minitrain.data import SEED_BASE, make_shard  # noqa: E402
from minitrain.ddp import barrier, cleanup, init_distributed, wrap_for_ddp  # noqa: E402
from minitrain.launch import run_streaming, torchrun_command  # noqa: E402
from minitrain.model import MiniGPTConfig  # noqa: E402
from minitrain.provenance import provenance  # noqa: E402
from minitrain.timing import summarize  # noqa: E402
from minitrain.trace import load_trace, overlap_table, profile_steps  # noqa: E402
from minitrain.train import build_model_for_corpus, seed_everything  # noqa: E402

SCRIPT = Path(__file__).resolve()  # what torchrun_command() is given
RESULT_NAME, PLOT_NAME = "wire.json", "wire.png"
WORLD_SIZE = 2
BATCH_SIZE, BLOCK_SIZE, LR = 16, 64, 3e-4  # train.py's defaults: the lab's run
GLOO_ALGORITHM = ("ring: ProcessGroupGloo's all-reduce calls gloo::allreduce without choosing an "
                  "algorithm, and gloo runs its ring (reduce-scatter, then all-gather) for any size")


@dataclass
class Plan:
    """How many steps each phase of a rank's run takes."""

    warmup: int = 10  # DDP rebuilds its buckets after the first step; the rest settles the caches
    measured: int = 40  # socket bytes and in-step all-reduce times
    repeats: int = 5  # headroom: blocks of steps with the all-reduce, then with the no-op hook
    block: int = 12
    profiled: int = 3  # kept small: each step adds about 0.5 MB of trace
    bench_iters: int = 30  # stand-alone all-reduces of each bucket's size


QUICK = Plan(warmup=3, measured=8, repeats=2, block=4, profiled=2, bench_iters=8)


# ------------------------------------------------------------------------------------------------
# The operating system's byte counters of a process's TCP connections (Linux, no root needed)


@dataclass(frozen=True)
class Connection:
    """One TCP connection as `ss -tin` shows it: endpoints and the kernel's byte counters."""

    inode: int
    local: str
    peer: str
    bytes_sent: int  # including any retransmissions
    bytes_retrans: int
    bytes_received: int


def tcp_connections() -> list[Connection] | None:
    """Every established TCP connection of this machine that this user may see, with counters;
    None where the OS has no `ss` and /proc (anything but Linux) or the kernel lacks the counters."""
    if not sys.platform.startswith("linux") or shutil.which("ss") is None:
        return None
    # -t TCP, -i tcp_info (bytes_sent, bytes_received), -e the socket's inode, -n numeric, -H no header
    text = subprocess.run(["ss", "-tineH", "state", "established"], capture_output=True, text=True,
                          check=True).stdout
    connections = []
    for record in re.split(r"\n(?=\S)", text.strip()):  # a socket's lines: first unindented, rest indented
        fields = record.split()
        counters = dict(re.findall(r"\b(bytes_sent|bytes_retrans|bytes_received|ino):(\d+)", record))
        if len(fields) < 4 or "ino" not in counters:
            continue
        # ss leaves out a counter that is still 0
        connections.append(Connection(int(counters["ino"]), fields[2], fields[3],
                                      *(int(counters.get(k, 0)) for k in ("bytes_sent", "bytes_retrans",
                                                                          "bytes_received"))))
    if "bytes_sent:" not in text:
        return None  # a kernel before 4.19 has no bytes_sent counter
    return connections


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process `pid` holds open (from its /proc/<pid>/fd links)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed meanwhile (the listing's own descriptor, for one)
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def my_connections() -> dict[str, Connection] | None:
    """This process's established TCP connections by local endpoint; None where unavailable."""
    everything = tcp_connections()
    if everything is None:
        return None
    mine = socket_inodes(os.getpid())
    return {c.local: c for c in everything if c.inode in mine}


def gloo_pair_endpoints(mine: dict[str, Connection] | None) -> list[str]:
    """Local endpoints of this rank's connections to the other ranks: gloo's pair sockets.

    Both ranks also talk to the rendezvous store in torchrun's agent; a connection belongs to a
    gloo pair exactly when its far end is a socket of another rank."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, None if mine is None else sorted(mine))
    others = {endpoint for r, ends in enumerate(everyone) if r != dist.get_rank() for endpoint in ends or []}
    return [] if mine is None else [local for local, c in mine.items() if c.peer in others]


def pair_bytes(endpoints: list[str]) -> dict[str, int] | None:
    """Bytes sent and received so far over the given connections of this process."""
    mine = my_connections()
    if mine is None or not endpoints:
        return None
    return {"sent": sum(mine[e].bytes_sent for e in endpoints),
            "retransmitted": sum(mine[e].bytes_retrans for e in endpoints),
            "received": sum(mine[e].bytes_received for e in endpoints)}


# ------------------------------------------------------------------------------------------------
# One rank


@dataclass
class WireHook:
    """State of the comm hook: each bucket's parameters, and when each all-reduce began and ended."""

    names: dict[int, str]  # parameter data pointer -> name
    comm: str = "allreduce"  # "noop": PyTorch's no-op hook, the step without communication
    step: int = 0
    buckets: dict[int, dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)


def wire_hook(state: WireHook, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's all-reduce (or the no-op hook), noting the bucket's contents and its start and end.

    time.monotonic() reads one clock shared by every process of the machine, so one rank's
    times compare with the other's: that is how the driver sees who waited for whom."""
    ready = time.monotonic()
    if state.comm == "noop":
        return debugging_hooks.noop_hook(None, bucket)
    state.buckets[bucket.index()] = {  # DDP rebuilds its buckets after step 1: keep the latest
        "index": bucket.index(), "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
        "params": [state.names[p.data_ptr()] for p in bucket.parameters()]}
    event = {"step": state.step, "bucket": bucket.index(), "ready": ready}
    state.events.append(event)

    def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        event["done"] = time.monotonic()
        return fut.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


def standalone_allreduce_ms(nbytes: int, iters: int) -> list[float]:
    """The same all-reduce alone, in the same process group: ms per call, both ranks started together."""
    tensor = torch.ones(nbytes // 4)
    times = []
    for i in range(3 + iters):  # 3 warm-up calls
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if i >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    return times


def worker(args: argparse.Namespace) -> None:
    """One rank: warm up, bench each bucket alone, measure steps, headroom blocks, profile, save."""
    plan = QUICK if args.quick else Plan()
    rank, world_size = init_distributed("gloo")
    seed_everything(SEED_BASE + rank)
    model, _ = build_model_for_corpus(args.corpus_dir, BLOCK_SIZE)
    names = {p.data_ptr(): name for name, p in model.named_parameters()}  # a tied matrix once
    shard = make_shard(rank, world_size, args.corpus_dir, batch_size=BATCH_SIZE, block_size=BLOCK_SIZE)
    ddp = wrap_for_ddp(model)
    hook = WireHook(names)
    ddp.register_comm_hook(hook, wire_hook)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=LR)

    def train_step() -> float:
        start = time.perf_counter()
        loss = ddp(next(shard)).loss
        with record_function("backward"):  # a named slice in the trace; costs nothing unprofiled
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        hook.step += 1
        return (time.perf_counter() - start) * 1e3

    for _ in range(plan.warmup):
        train_step()
    buckets = [hook.buckets[i] for i in sorted(hook.buckets)]
    standalone = {b["bytes"]: standalone_allreduce_ms(b["bytes"], plan.bench_iters) for b in buckets}
    endpoints = gloo_pair_endpoints(my_connections())

    barrier()
    hook.events = []
    before = pair_bytes(endpoints)
    for _ in range(plan.measured):
        train_step()
    after = pair_bytes(endpoints)  # every all-reduce of those steps has completed on this rank
    events = hook.events

    blocks = []
    for repeat in range(plan.repeats):  # alternate which mode goes first, so drift cancels out
        for comm in ("allreduce", "noop") if repeat % 2 == 0 else ("noop", "allreduce"):
            hook.comm = comm
            barrier()  # without the all-reduce the ranks drift apart; start each block together
            blocks.append({"repeat": repeat, "comm": comm, "step_ms": [train_step() for _ in range(plan.block)]})
    hook.comm = "allreduce"

    barrier()
    profile_steps(train_step, plan.profiled, Path(args.work) / f"trace-rank-{rank}.json.gz")
    ddp_data = ddp._get_ddp_logging_data()  # DDP's own record of its (rebuilt) buckets
    note = {
        "rank": rank, "world_size": world_size, "threads": torch.get_num_threads(),
        "plan": plan.__dict__, "param_names": list(names.values()),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "buckets": buckets, "standalone_ms": {str(k): v for k, v in standalone.items()},
        "pair_endpoints": endpoints, "bytes_before": before, "bytes_after": after,
        "events": events, "blocks": blocks,
        "ddp_bucket_sizes": [int(s) for s in str(ddp_data.get("rebuilt_bucket_sizes", "")).split()],
        "ddp_param_order": [int(i) for i in str(ddp_data.get("rebuilt_per_bucket_param_indices", "")).split()],
    }
    (Path(args.work) / f"rank-{rank}.json").write_text(json.dumps(note))
    cleanup()


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


def analyse(notes: list[dict], bench: dict | None) -> dict:
    """wire.json's content (without provenance) from both ranks' notes and the benchmark's fit."""
    first = notes[0]
    n = first["world_size"]
    steps = first["plan"]["measured"]
    grad = first["gradient_bytes"]
    ring = 2 * (n - 1) / n * grad
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
    predicted = (sum(allreduce_bench.predict_allreduce_ms(b, bench["fit"]) for b in bucket_bytes)
                 if bench else None)

    repeats = []
    for r in range(first["plan"]["repeats"]):
        block = {b["comm"]: statistics.median(b["step_ms"]) for b in first["blocks"] if b["repeat"] == r}
        repeats.append({"repeat": r, "step_ms_allreduce": block["allreduce"], "step_ms_noop": block["noop"],
                        "comm_share": 1 - block["noop"] / block["allreduce"]})

    names = first["param_names"]
    return {
        "config": {"world_size": n, "threads_per_rank": first["threads"], "batch_size_per_rank": BATCH_SIZE,
                   "block_size": BLOCK_SIZE, "n_layer": MiniGPTConfig.n_layer, "n_head": MiniGPTConfig.n_head,
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
            "in_step_over_standalone": mean("allreduce_ms") / sum(standalone),
            "waiting_share": mean("waiting_ms") / mean("allreduce_ms"),
            "per_rank": [{"rank": rank, "in_step_mean": mean("allreduce_ms", mine),
                          "waiting_mean": mean("waiting_ms", mine)}
                         for rank in range(n) if (mine := [r for r in rows if r["rank"] == rank])],
            "per_step": rows,
            "method": "per step and rank, summed over buckets. In-step: from a bucket's hook call (its "
                      "gradients ready) to its all-reduce done; waiting: until the other rank's same "
                      "bucket was ready too; transfer: the rest. Ratios use means over steps and ranks. "
                      "Stand-alone: median of the same bytes all-reduced between barriers in the same "
                      "process group; predicted: the benchmark's alpha-beta fit",
        },
        "headroom": {"repeats": repeats,
                     "step_ms_allreduce": statistics.median(r["step_ms_allreduce"] for r in repeats),
                     "step_ms_noop": statistics.median(r["step_ms_noop"] for r in repeats),
                     "comm_share": statistics.median(r["comm_share"] for r in repeats),
                     "method": "rank 0's median step time per block, blocks alternating DDP's all-reduce "
                               "hook and PyTorch's noop_hook (train.py --comm noop) in the same processes"},
    }


def run_wire(out: Path = BEYOND_DIR, quick: bool = False, corpus_dir: Path = DEFAULT_CORPUS_DIR,
             bench_path: Path = BEYOND_DIR / allreduce_bench.RESULT_NAME, command: str = "",
             echo=print) -> dict:
    """Run both ranks, then write wire.json, wire.png and the two traces into `out`."""
    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ensure_corpus(corpus_dir)
    with tempfile.TemporaryDirectory() as work:
        script_args = ["--worker", "--work", work, "--corpus-dir", str(corpus_dir)] + (["--quick"] if quick else [])
        run_streaming(torchrun_command(SCRIPT, WORLD_SIZE, *script_args), timeout=600, echo=echo)
        notes = [json.loads((Path(work) / f"rank-{r}.json").read_text()) for r in range(WORLD_SIZE)]
        traces = []
        for r in range(WORLD_SIZE):
            name = f"trace-rank-{r}.json.gz"
            shutil.move(Path(work) / name, out / name)
            traces.append({"file": name, "rows": overlap_table(load_trace(out / name))})
    bench = allreduce_bench.load_results(bench_path) if Path(bench_path).is_file() else None
    results = analyse(notes, bench)
    overlap_rows = [row | {"rank": r} for r, t in enumerate(traces) for row in t["rows"]]
    results["overlap"] = {
        "rows": overlap_rows,
        "overlapped_share": (sum(r["overlapped_ms"] for r in overlap_rows)
                             / sum(r["allreduce_ms"] for r in overlap_rows)),
        "traces": [t["file"] for t in traces],
        "open_with": "https://ui.perfetto.dev (Open trace file; .json.gz is read as is)",
    }
    results["benchmark"] = ({"file": str(bench_path), "fit": bench["fit"]} if bench
                            else {"file": None, "note": "run python -m minitrain.allreduce_bench first"})
    results["findings"] = findings_sentence(results)
    results["provenance"] = provenance(corpus_dir) | {
        # other programs running meanwhile slow a 2-core machine: say how busy it was
        "load_average_1min": os.getloadavg()[0], "command": command, "runtime_s": time.perf_counter() - start}
    write_json(out / RESULT_NAME, results)
    plot(results, out / PLOT_NAME)
    return results


def findings_sentence(results: dict) -> str:
    """The headline numbers in words, for the manifest's lesson paragraph."""
    buckets, wire, ar, head = (results["buckets"], results["bytes_per_step"], results["allreduce_ms"],
                               results["headroom"])
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    parts = [f"DDP packs MiniGPT's {mb(wire['gradient'])} of gradients into "
             f"{len(buckets)} bucket{'s' if len(buckets) != 1 else ''}"]
    measured = wire["measured"]
    if measured["sent_per_rank"]:
        parts.append(f"a ring all-reduce over {results['config']['world_size']} ranks should send "
                     f"{mb(wire['ring_theory_per_rank'])} per rank per step and the sockets carried "
                     f"{mb(statistics.fmean(measured['sent_per_rank']))} "
                     f"({measured['sent_over_theory']:.3f}x theory)")
    else:
        parts.append(f"a ring all-reduce should send {mb(wire['ring_theory_per_rank'])} per rank per "
                     "step (socket counters not available on this OS)")
    allreduce = (f"inside the step the all-reduce took {ar['in_step']['mean']:.1f} ms on average, "
                 f"{ar['in_step_over_standalone']:.1f}x the {ar['standalone']:.1f} ms the same bytes take alone")
    if ar["predicted"] is not None:
        allreduce += f" (alpha-beta fit: {ar['predicted']:.1f} ms)"
    parts.append(allreduce + f", and {ar['waiting']['mean']:.1f} ms of it "
                             f"({ar['waiting_share']:.0%}) was waiting for the other rank")
    parts.append(f"communication is {head['comm_share']:.0%} of the step ({head['step_ms_allreduce']:.0f} ms "
                 f"with the all-reduce, {head['step_ms_noop']:.0f} ms with the no-op hook)")
    if "overlap" in results:
        parts.append(f"{results['overlap']['overlapped_share']:.0%} of the all-reduce overlapped backward")
    return "; ".join(parts) + "."


def plot(results: dict, path: Path) -> None:
    """Bytes (theory vs sockets), all-reduce time (in-step vs alone vs fit), step with vs without."""

    import matplotlib.pyplot as plt

    wire, ar, head = results["bytes_per_step"], results["allreduce_ms"], results["headroom"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.6))

    sent = wire["measured"]["sent_per_rank"] or []
    labels = ["gradients", "ring theory\nper rank"] + [f"sent by\nrank {r}" for r in range(len(sent))]
    values = [wire["gradient"], wire["ring_theory_per_rank"], *sent]
    bars = ax1.bar(labels, [v / 1e6 for v in values], color=["0.6", "#4c72b0"] + ["#55a868"] * len(sent))
    ax1.bar_label(bars, labels=[f"{v:,.0f} B" for v in values], fontsize=7)
    if not sent:
        ax1.text(0.5, 0.5, "socket counters:\nnot available on this OS", transform=ax1.transAxes, ha="center")
    ax1.set_ylabel("MB per step")
    ax1.set_title("Bytes per step: theory vs the sockets")

    transfer, waiting = ar["transfer"]["mean"], ar["waiting"]["mean"]
    ax2.bar(["in the step"], [waiting], color="#dd8452", label="waiting for the other rank")
    ax2.bar(["in the step"], [transfer], bottom=[waiting], color="#4c72b0", label="transfer (after both ready)")
    ax2.bar(["alone, same bytes"], [ar["standalone"]], color="#55a868")
    if ar["predicted"] is not None:
        ax2.bar(["alpha-beta fit"], [ar["predicted"]], color="0.6")
    ax2.set_ylabel("ms per step (in the step: mean; alone: median)")
    ax2.set_title(f"All-reduce: in the step {ar['in_step_over_standalone']:.1f}x alone")
    ax2.legend(fontsize=8)

    for r in head["repeats"]:
        ax3.plot([0, 1], [r["step_ms_allreduce"], r["step_ms_noop"]], "o-", color="0.7")
    ax3.plot([0, 1], [head["step_ms_allreduce"], head["step_ms_noop"]], "o-", color="#c44e52", linewidth=2,
             label="median of repeats")
    ax3.set_xticks([0, 1], ["DDP all-reduce", "no-op hook"])
    ax3.set_xlim(-0.5, 1.5)
    ax3.set_ylim(0, 1.15 * max(r["step_ms_allreduce"] for r in head["repeats"]))
    ax3.set_ylabel("step time, ms (median of a block)")
    ax3.set_title(f"Communication: {head['comm_share']:.0%} of the step")
    ax3.legend(fontsize=8)

    config, prov = results["config"], results["provenance"]
    fig.suptitle(f"The wire during training: {config['world_size']} gloo ranks, {config['threads_per_rank']} "
                 f"thread(s) each, {prov['cores']} cores, load average {prov['load_average_1min']:.1f}, "
                 f"torch {prov['torch']}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def bucket_table(results: dict) -> str:
    """The buckets as text: index, bytes, and their parameters in the order backward filled them."""
    lines = []
    for b in results["buckets"]:
        lines.append(f"bucket {b['index']}: {b['bytes']:,} bytes, {len(b['params'])} tensors")
        lines += [f"  {name}" for name in b["params"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=BEYOND_DIR, help=f"output folder (default: {BEYOND_DIR})")
    p.add_argument("--quick", action="store_true", help="a few steps per phase: for tests and notebooks")
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one rank, under torchrun
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m minitrain.wire", *map(shlex.quote, given)])
    results = run_wire(args.out, args.quick, args.corpus_dir, command=command)
    print(bucket_table(results))
    print(results["findings"])
    print(f"wrote {RESULT_NAME}, {PLOT_NAME} and {', '.join(results['overlap']['traces'])} to {args.out} "
          f"in {results['provenance']['runtime_s']:.0f} s")


if __name__ == "__main__":
    main()
