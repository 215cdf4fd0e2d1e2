"""Blocks F and G: the scaling plot, the manifest, and the lesson paragraph written from the numbers."""

import json
import statistics
from pathlib import Path

from minitrain.artifacts import save_figure, write_json
from minitrain.lab.runs import PHASES, SINGLE_DIR, phase_medians, read_run
from minitrain.paths import BEYOND_DIR
from minitrain.timing import VARIANTS, manifest_fields, summarize
from minitrain.verify import compare_state_files


def lesson_notes(m: dict) -> str:
    """The "why is 2 processes slower (or not) here" paragraph, derived from the manifest's numbers."""
    speedup, share = m["speedup_2proc"], m["allreduce_share_of_step"]
    t1, t2, cores = m["threads_per_rank"]["1proc"], m["threads_per_rank"]["2proc"], m["cores"]
    direction = "faster" if speedup > 1 else "slower"
    text = [
        f"With {m['world_size']} processes this run trained at {m['tokens_per_sec_2proc']:,.0f} tokens/s "
        f"against {m['tokens_per_sec_1proc']:,.0f} with 1 process: {speedup:.2f}x, so 2 processes "
        f"were {direction} here.",
        f"Each rank processed the same per-rank batch ({m['batch_size_per_rank']} x {m['block_size']} "
        f"tokens), so 2 processes do twice the work per step; the single process ran {t1} thread(s), "
        f"each of the 2 ranks {t2} thread(s) (torchrun sets OMP_NUM_THREADS=1 when there is more "
        f"than one process), on {cores} usable core(s).",
        f"The gradient all-reduce itself (comm hook, {m['gradient_bytes'] / 1e6:.2f} MB of float32 "
        f"gradients in {len(m['buckets'])} bucket(s)) took a median {m['allreduce_p50_ms']:.2f} ms "
        f"(p95 {m['allreduce_p95_ms']:.2f} ms), {share:.0%} of the {m['step_p50_ms_2proc']:.1f} ms "
        f"step; the barrier-bracketed backward (variant A: backward, all-reduce and the wait for "
        f"the slower rank) took {m['backward_allreduce_p50_ms']:.2f} ms.",
    ]
    # speedup = 2 x step_1proc / step_2proc: each rank must finish its step in under twice the time
    ratio = m["step_p50_ms_2proc"] / m["step_p50_ms_1proc"]
    per_rank = (f"Each rank's step took {ratio:.2f}x the single process's step for the same per-rank "
                f"batch ({t2} thread against {t1}, plus the all-reduce); 2 processes win when that "
                f"ratio stays under 2.")
    if speedup > 1:
        text.append(per_rank + " The lab sheet expected the opposite. "
                    + ("The model is so small that one process cannot keep several cores busy: each "
                       "matrix multiply is tiny, so splitting it across threads buys little, while two "
                       "processes each run whole steps in parallel on their own core; the all-reduce "
                       "is too small a share of the step to undo that." if t1 > 1 and cores > 1 else
                       "The single process ran on one thread, so the second process added a core's "
                       "worth of compute at the price of the all-reduce."))
    elif m["world_size"] * t2 > cores:
        text.append(per_rank + " As the lab sheet expected: the ranks' threads outnumber the cores, "
                    "so the processes contend for them and pay the all-reduce on top.")
    elif share >= 0.3:
        text.append(per_rank + " As the lab sheet expected: the all-reduce and the wait it forces "
                    "are a large share of the step, more than the second process adds.")
    else:
        text.append(per_rank + " The lab sheet expected 2 processes to be slower, and they were, but "
                    "not because of the all-reduce, which is a small share of the step: the "
                    f"single process's {t1} threads used the cores better than two 1-thread ranks "
                    "did, or other load on the machine took cycles from the ranks.")
    text.append(
        "The sheet's expectation holds when the ranks contend for the same cores (more ranks x "
        "threads than cores, e.g. 2 processes pinned to one core), when one process alone already "
        "uses every core well (larger matrices), or when the all-reduce grows to a large share of "
        "the step (a bigger model, a slower link, a smaller batch per rank).")
    return " ".join(text)


def beyond_findings(beyond: Path) -> dict[str, dict]:
    """The findings records of each deeper measurement saved in `beyond` (separate runs), by name,
    with the file, command and date they came from. Read from the JSON files alone."""
    found = {}
    for path in sorted(Path(beyond).glob("*.json")):
        results = json.loads(path.read_text())
        if isinstance(results, dict) and "findings" in results and "measurement" in results:
            prov = results["provenance"]
            found[results["measurement"]] = {"file": f"{Path(beyond).name}/{path.name}", "date": prov["date"],
                                             "command": prov["command"], "findings": results["findings"]}
    return found


def findings_table(records: list[dict]) -> str:
    """Findings records as text: name, value and unit, then what it means."""
    def value(v: object) -> str:
        if isinstance(v, list):
            return "-".join(value(x) for x in v)
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    width = max((len(r["name"]) for r in records), default=0)
    return "\n".join(f"{r['name']:<{width}}  {value(r['value'])} {r['unit']}: {r['meaning']}" for r in records)


def build_manifest(out: Path, command: str) -> dict:
    """manifest.json's content, from the 1- and 2-process runs and the state comparison in `out`."""
    run1, _ = read_run(out / SINGLE_DIR)
    run2, timings2 = read_run(out)
    measured = timings2[run2["warmup_steps"]:]
    timing = {name: summarize([r[v.field] for r in measured])[stat]
              for v in VARIANTS for name, stat in manifest_fields(v).items()}
    comparison = compare_state_files(out / "state-rank-0.pt", out / "state-rank-1.pt")
    tps1, tps2 = run1["tokens_per_sec"]["median"], run2["tokens_per_sec"]["median"]
    manifest = {
        "lab": "01-ddp-on-cpu",
        "seed": run2["seed_base"],
        "backend": "gloo",
        "world_size": run2["world_size"],
        "launcher": run2["launcher"],
        "model_params": run2["model_params"],
        "steps": run2["steps"],
        "warmup_steps": run2["warmup_steps"],
        **timing,
        "step_p50_ms_1proc": run1["summary"]["step_ms"]["median"],
        "step_p50_ms_2proc": run2["summary"]["step_ms"]["median"],
        "tokens_per_sec_1proc": tps1,
        "tokens_per_sec_2proc": tps2,
        "tokens_per_sec_spread": {"1proc": run1["tokens_per_sec"], "2proc": run2["tokens_per_sec"]},
        "speedup_2proc": tps2 / tps1,
        "allreduce_share_of_step": timing["allreduce_p50_ms"] / run2["summary"]["step_ms"]["median"],
        "step_breakdown_ms": {"1proc": phase_medians(run1), "2proc": phase_medians(run2)},
        "buckets": run2["buckets"],
        "gradient_bytes": sum(b["bytes"] for b in run2["buckets"]),
        "byte_equivalent": comparison.allclose,
        "max_abs_diff": comparison.max_abs_diff,
        "bitwise_equal": comparison.bitwise_equal,
        "threads_per_rank": {"1proc": run1["threads_per_rank"], "2proc": run2["threads_per_rank"]},
        "cores": run2["cores"],
        "cpu_model": run2["cpu_model"],
        "torch": run2["torch"],
        "python": run2["python"],
        "platform": run2["platform"],
        "batch_size_per_rank": run2["batch_size_per_rank"],
        "block_size": run2["block_size"],
        "lr": run2["lr"],
        "corpus_sha256": run2["corpus_sha256"],
        "date": run2["date"],
        "command": command,
        "run_commands": {"1proc": run1["command"], "2proc": run2["command"]},
    }
    manifest["beyond_findings"] = beyond_findings(out / BEYOND_DIR.name)
    manifest["lesson_notes"] = lesson_notes(manifest)
    return manifest


def write_manifest(manifest: dict, path: Path) -> None:
    """Write the manifest atomically: a reader never sees a half-written one."""
    write_json(path, manifest)


def plot_scaling(out: Path, path: Path) -> None:
    """scaling.png: tokens/s per process count (spread over measured steps), and the step breakdown."""
    runs = [read_run(out / SINGLE_DIR), read_run(out)]
    import matplotlib.pyplot as plt  # here: reading and writing the manifest never needs it

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = [f"{r['world_size']} process{'es' if r['world_size'] > 1 else ''}\n"
              f"{r['threads_per_rank']} thread(s) per rank" for r, _ in runs]
    samples = [[t["tokens"] / (t["step_ms"] / 1e3) for t in timings[r["warmup_steps"]:]]
               for r, timings in runs]
    ax1.boxplot(samples, tick_labels=labels, widths=0.5, showfliers=True)
    for i, s in enumerate(samples, start=1):
        median = statistics.median(s)
        ax1.annotate(f"{median:,.0f}", (i, median), xytext=(42, 0), textcoords="offset points",
                     va="center", fontsize=9)
    ax1.set_ylabel("tokens / second (global)")
    ax1.set_ylim(bottom=0)
    ax1.set_title(f"Throughput over {len(samples[0])} measured steps")

    bottoms = [0.0] * len(runs)
    for phase, color in zip(PHASES, ("#4c72b0", "#55a868", "#c44e52", "#8172b2")):
        heights = [phase_medians(r)[phase] for r, _ in runs]
        ax2.bar(labels, heights, bottom=bottoms, color=color, label=phase, width=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax2.set_ylabel("median ms per step")
    ax2.set_title("Where a step's time goes")
    ax2.legend(loc="upper left", fontsize=9)
    r = runs[1][0]
    fig.suptitle(f"MiniGPT ({r['model_params']:,} params), batch {r['batch_size_per_rank']} x "
                 f"{r['block_size']} tokens per rank, gloo on {r['cores']} core(s): {r['cpu_model']}",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
