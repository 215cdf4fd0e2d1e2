"""Block F and the manifest: the scaling plot, and manifest.json from the runs, with Block G's paragraph
(`lesson_notes`) empty until the learner writes it (set_lesson_notes)."""

import json
from dataclasses import asdict, replace
from pathlib import Path

from minitrain.artifacts import save_figure
from minitrain.lab.reporting.disturbance import disturbance
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.results_file import Finding, holds_results, typed_results
from minitrain.lab.reporting.runs import (PHASES, REPEATS_DIR, SINGLE_DIR, output_dir, phase_medians, read_repeats,
                                          read_run, throughput)
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.paths import BEYOND_DIR, relative
from minitrain.run_record import RunRecord
from minitrain.timing import VARIANTS, manifest_fields, summarize
from minitrain.verify import compare_state_files


def plural(count: int, noun: str) -> str:
    """'1 thread', '2 threads'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def beyond_results(beyond: Path) -> dict[str, dict]:
    """The results of each deeper measurement saved in `beyond` (separate runs), by name, their envelope
    typed (typed_results). Read from the JSON files alone."""
    found = {}
    for path in sorted(Path(beyond).glob("*.json")):
        try:
            results = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not valid JSON ({e}); re-run its measurement or restore it from git") from e
        if holds_results(results):
            found[results["measurement"]] = typed_results(results, relative(path)) | {
                "file": f"{Path(beyond).name}/{path.name}"}
    return found


def beyond_findings(beyond: Path) -> dict[str, dict]:
    """The findings records of each deeper measurement saved in `beyond` (separate runs), by name,
    with the file, command and date they came from."""
    return {name: {"file": results["file"], "date": results["provenance"].date,
                   "command": results["provenance"].command, "findings": [asdict(f) for f in results["findings"]]}
            for name, results in beyond_results(beyond).items()}


def manifest_records(folder: Path | None = None) -> list[dict]:
    """[the manifest.json of `folder` (default: the lab's output folder) as a dict, provenance fields at its top
    level], or [] while no lab run has written it (a student tree before `make lab`)."""
    path = Path(folder or output_dir()) / "manifest.json"
    return [asdict(Manifest.read(path))] if path.exists() else []


def findings_table(records: list[Finding]) -> str:
    """Findings records as text: name, value and unit, then what it means."""
    def value(v: object) -> str:
        if isinstance(v, list):
            return "-".join(value(x) for x in v)
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.1f}" if abs(v) >= 100 else f"{v:.5g}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    width = max((len(r.name) for r in records), default=0)
    return "\n".join(f"{r.name:<{width}}  {value(r.value)} {r.unit}: {r.meaning}" for r in records)


def median_run(runs: list[RunRecord]) -> RunRecord:
    """The repeat with the median tokens/s (the lower middle one for an even count)."""
    return sorted(runs, key=throughput)[(len(runs) - 1) // 2]


def share(run: RunRecord) -> float:
    """The comm hook's all-reduce over the step, medians over the run's measured steps."""
    return run.summary["allreduce_ms"]["median"] / run.summary["step_ms"]["median"]


def build_manifest(out: Path, command: str) -> Manifest:
    """manifest.json's content: the sheet's fields from the sheet's runs and the repeats in `out`,
    with lesson_notes empty until the learner writes their paragraph (set_lesson_notes)."""
    sheet1, _ = read_run(out / SINGLE_DIR)
    sheet2, timings2 = read_run(out)
    repeats = read_repeats(out)
    if not repeats[1] or len(repeats[1]) != len(repeats[2]):
        raise FileNotFoundError(f"{out / REPEATS_DIR} holds {len(repeats[1])} 1-process and "
                                f"{len(repeats[2])} 2-process repeats; run python -m minitrain.lab.experiment")
    run1, run2 = median_run(repeats[1]), median_run(repeats[2])
    tps = {n: [throughput(r) for r in repeats[n]] for n in (1, 2)}
    speedups = [b / a for a, b in zip(tps[1], tps[2])]
    measured = timings2[sheet2.warmup_steps:]
    timing = {name: summarize([r[v.field] for r in measured])[stat]
              for v in VARIANTS for name, stat in manifest_fields(v).items()}
    comparison = compare_state_files(out / "state-rank-0.pt", out / "state-rank-1.pt")
    tps1, tps2 = throughput(run1), throughput(run2)
    return Manifest(**{
        "lab": "01-ddp-on-cpu",
        "seed": sheet2.seed_base,
        "backend": "gloo",
        "world_size": sheet2.world_size,
        "launcher": sheet2.launcher,
        "model_params": sheet2.model_params,
        "steps": sheet2.steps,
        "warmup_steps": sheet2.warmup_steps,
        "run_ids": {"1proc": sheet1.run_id, "2proc": sheet2.run_id},
        **timing,
        "tokens_per_sec_1proc": tps1,
        "tokens_per_sec_2proc": tps2,
        "speedup_2proc": tps2 / tps1,
        "speedup_2proc_range": [min(speedups), max(speedups)],
        "verdict": verdict_over_repeats(tps[2], tps[1]),
        "repeats": {
            "count": len(speedups), "timing": "comm hook only (no barriers), for both process counts",
            "tokens_per_sec": "global tokens per step / median step time over the steps after the warm-up",
            "order": "alternating 1, 2, 1, 2, ...", "speedups": speedups,
            **{f"{n}proc": [{"run_id": r.run_id, "tokens_per_sec": t,
                             "step_p50_ms": r.summary["step_ms"]["median"], "command": r.command}
                            | ({"allreduce_share_of_step": share(r)} if n == 2 else {})
                            for r, t in zip(repeats[n], tps[n])] for n in (1, 2)},
            "median_run_ids": {"1proc": run1.run_id, "2proc": run2.run_id},
        },
        "step_p50_ms_1proc": run1.summary["step_ms"]["median"],
        "step_p50_ms_2proc": run2.summary["step_ms"]["median"],
        "allreduce_share_of_step": share(run2),
        "step_breakdown_ms": {"1proc": phase_medians(run1), "2proc": phase_medians(run2)},
        "buckets": sheet2.buckets,
        "gradient_bytes": sum(b["bytes"] for b in sheet2.buckets),
        "byte_equivalent": comparison.allclose,
        "max_abs_diff": comparison.max_abs_diff,
        "bitwise_equal": comparison.bitwise_equal,
        "threads_per_rank": {"1proc": run1.threads_per_rank, "2proc": run2.threads_per_rank},
        "cores": sheet2.cores,
        "cpu_model": sheet2.cpu_model,
        "sitting": sheet2.sitting,
        "torch": sheet2.torch,
        "python": sheet2.python,
        "platform": sheet2.platform,
        "batch_size_per_rank": sheet2.batch_size_per_rank,
        "block_size": sheet2.block_size,
        "lr": sheet2.lr,
        "corpus_sha256": sheet2.corpus_sha256,
        "date": sheet2.date,
        "command": command,
        "run_commands": {"1proc": sheet1.command, "2proc": sheet2.command},
        "beyond_findings": beyond_findings(out / BEYOND_DIR.name),
        "lesson_notes": "",
        "disturbed": disturbance(tps[1], tps[2], run1.threads_per_rank, run2.threads_per_rank),
    })


def set_lesson_notes(out: Path, notes: str) -> Manifest:
    """Put the learner's paragraph (Block G) into the manifest in `out` as lesson_notes; return it."""
    manifest = replace(Manifest.read(Path(out) / "manifest.json"), lesson_notes=notes)
    manifest.write(Path(out) / "manifest.json")
    return manifest


def plot_scaling(m: Manifest, path: Path) -> None:
    """scaling.png from the manifest (scaling_figure)."""
    save_figure(scaling_figure(m), path)


def scaling_figure(m: Manifest):
    """The figure of scaling.png: tokens/s of every repeat and each side's median against the ideal 2x, and where
    a step's time goes in the median repeats (comm-hook timing only: no barrier waits in any phase)."""
    import matplotlib.pyplot as plt  # here: reading and writing the manifest never needs it

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.8))
    reps, threads = m.repeats, m.threads_per_rank
    medians = {1: m.tokens_per_sec_1proc, 2: m.tokens_per_sec_2proc}
    for n, color in ((1, "#4c72b0"), (2, "#dd8452")):
        values = [r["tokens_per_sec"] for r in reps[f"{n}proc"]]
        ax1.plot([n] * len(values), values, "o", color=color, alpha=0.6, markersize=7,
                 label=f"{n} process{'es' if n > 1 else ''} x {plural(threads[f'{n}proc'], 'thread')}: each repeat")
        ax1.hlines(medians[n], n - 0.18, n + 0.18, color=color, linewidth=3)
        ax1.annotate(f"median {medians[n]:,.0f}", (n + 0.2, medians[n]), va="center", fontsize=9)
    ax1.plot([1, 2], [medians[1], 2 * medians[1]], "--", color="0.4",
             label="ideal: 2 processes do 2x the tokens of 1")
    lo, hi = m.speedup_2proc_range
    ax1.set_title(f"2 vs 1 process, repeat by repeat: {m.paired_speedup():.2f}x (median; range {lo:.2f}-{hi:.2f}x): "
                  f"{m.verdict}\nthick lines: each side's median repeat (their own ratio {m.speedup_2proc:.2f}x)"
                  + ("\nDISTURBED: other programs used the CPUs (the checker's WARN row)" if m.disturbed else ""),
                  fontsize=10, color="#c44e52" if m.disturbed else "black")
    ax1.set_xticks([1, 2])
    ax1.set_xlim(0.5, 2.8)
    ax1.set_xlabel("processes (torchrun --nproc-per-node)")
    ax1.set_ylabel("tokens / second, all processes (median over measured steps)")
    # from the data: every repeat and the ideal line drawn, whatever the ratio (a disturbed run's too)
    drawn = [r["tokens_per_sec"] for n in (1, 2) for r in reps[f"{n}proc"]] + [2 * medians[1], medians[2]]
    ax1.set_ylim(0, 1.25 * max(drawn))
    ax1.legend(loc="upper left", fontsize=8)

    labels = [f"1 process\n{plural(threads['1proc'], 'thread')}", f"2 processes\n{plural(threads['2proc'], 'thread')} each"]
    bottoms = [0.0, 0.0]
    names = {"forward": "forward (incl. drawing the batch, next(shard))", "backward": "backward (without the all-reduce)",
             "all-reduce": "all-reduce (comm hook; with 2 processes incl. waiting for the peer)"}
    for phase, color in zip(PHASES, ("#4c72b0", "#55a868", "#c44e52", "#8172b2")):
        heights = [m.step_breakdown_ms[k][phase] for k in ("1proc", "2proc")]
        ax2.bar(labels, heights, bottom=bottoms, color=color, label=names.get(phase, phase), width=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax2.set_ylabel("ms per step (each phase's median)")
    ax2.set_title("Where a step's time goes (the median repeats)", fontsize=10)
    ax2.legend(loc="upper left", fontsize=8)
    ax2.set_ylim(0, 1.35 * max(bottoms))
    fig.suptitle(f"MiniGPT ({m.model_params:,} params), {m.batch_size_per_rank} x {m.block_size} "
                 f"tokens per rank per step, gloo on {plural(m.cores, 'logical CPU')} of {m.cpu_model}; "
                 f"{m.repeats['count']} repeats each, alternating", fontsize=10)
    fig.tight_layout()
    return fig
