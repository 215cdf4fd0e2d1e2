"""What each level of notebook 15's DDP buys: its training step against torch's DDP, and its all-reduces.

    python -m minitrain.measure.scratch [--out DIR] [--quick] [--repeats N]

The driver starts this module under the lab's torchrun (2 ranks, loopback only). Every rank holds torch's
DDP and the three scratch levels (and both at a small bucket cap), each a DDPRank with its own MiniGPT (the
lab's defaults) and its own AdamW, and steps them in turn, round after round (interleaved medians: the same
machine load for all). It notes each one's step times and finish() (the wait for what backward did not
hide) round by round, the all-reduces of one step, and profiles a few steps of each for the share of the
all-reduce time that overlapped backward (measure.trace, as notebook 10 reads it). The driver writes
scratch.json and scratch.png. A benchmark: it never fails on speed.
"""

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from minitrain.artifacts import save_figure
from minitrain.cli import positive_int
from minitrain.ddp import barrier, wrap_for_ddp
from minitrain.lab.grading.graders.from_scratch_cases import AllReduceRecorder
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.bench import interleaved_times
from minitrain.measure.measurement import Measurement, relaunch
from minitrain.measure.trace import load_trace, overlap_table, overlapped_share, profile_steps
from minitrain.paths import BEYOND_DIR  # noqa: F401 (for the notebook)
from minitrain.rank import DDPRank, StepRecord, rebuilt_buckets
from minitrain.scratch_ddp import BucketedDDP, NaiveDDP, OverlappedDDP
from minitrain.train import TrainConfig

PLOT_NAME = "scratch.png"
BLOCKS = 5  # a verdict compares the medians of this many blocks of rounds per rank (not single rounds)
SMALL_CAP_MB = 0.25  # several buckets: what overlap can do with MiniGPT's 1.04 MiB of gradients
BASE = "torch DDP"  # every level's step is compared with this one's
LEVELS: dict[str, Callable[[nn.Module], nn.Module]] = {  # torch's DDP (no Python comm hook), then the levels
    BASE: wrap_for_ddp, "NaiveDDP": NaiveDDP, "OverlappedDDP": OverlappedDDP, "BucketedDDP": BucketedDDP,
    f"torch DDP, {SMALL_CAP_MB:g} MiB": partial(wrap_for_ddp, bucket_cap_mb=SMALL_CAP_MB),
    f"BucketedDDP, {SMALL_CAP_MB:g} MiB": partial(BucketedDDP, bucket_cap_mb=SMALL_CAP_MB),
}
KEYS = dict(zip(LEVELS, ("torch_ddp", "naive", "overlapped", "bucketed", "torch_ddp_small_cap", "bucketed_small_cap")))


@dataclass(frozen=True)
class Plan:
    """How many rounds (one step of every level each) and profiled steps the run takes."""

    warmup: int = 5  # rounds left out: allocations, AdamW's state, DDP's bucket rebuild at step 1
    repeats: int = 30  # rounds timed, interleaved
    profiled: int = 3  # steps of each level profiled after the timed rounds, for the overlap share

    @classmethod
    def quick(cls) -> "Plan":
        """A few rounds and one profiled step per level: for tests."""
        return cls(warmup=2, repeats=3, profiled=1)


# ------------------------------------------------------------------------------------------------
# One rank


def _numels(run: DDPRank) -> list[int]:
    """The sizes (float32 elements) of one step's all-reduces: DDP's rebuilt buckets, or the level's calls."""
    if isinstance(run.ddp, DistributedDataParallel):
        return [nbytes // 4 for nbytes in rebuilt_buckets(run.ddp)[0]]
    recorder = AllReduceRecorder()
    try:
        run.step()
    finally:
        recorder.close()
    return [call["numel"] for call in recorder.calls]


def _step_into(run: DDPRank, records: list[StepRecord]) -> None:
    """One training step of `run`, its record kept: the step function the rounds time."""
    records.append(run.step())


def worker(plan: Plan, corpus_dir: Path, work: Path, rank: int, world_size: int) -> dict:
    """One rank: warm up, time the interleaved rounds, note one step's all-reduces, profile each level.
    Each level is a DDPRank (seed 35000 + rank, its shard, AdamW) with the level's wrap, stepped whole:
    forward, backward, finish() (timed apart; none for torch's DDP, which waits inside backward), AdamW."""
    runs = {name: DDPRank(rank, world_size, corpus_dir, wrap=wrap, instrumented=False) for name, wrap in LEVELS.items()}
    records: dict[str, list[StepRecord]] = {name: [] for name in runs}
    steps = {name: partial(_step_into, run, records[name]) for name, run in runs.items()}
    interleaved_times(steps, plan.warmup)
    for kept in records.values():
        kept.clear()
    barrier()  # the timed rounds start with both ranks together
    rounds = interleaved_times(steps, plan.repeats)
    medians = {name: statistics.median(times) for name, times in rounds.items()}
    finish = {name: [r.finish_ms for r in kept] if kept[0].finish_ms is not None else None
              for name, kept in records.items()}
    numels = {name: _numels(run) for name, run in runs.items()}
    overlap = {}
    for i, (name, run) in enumerate(runs.items()):
        path = work / f"trace-{i}-rank-{rank}.json.gz"
        profile_steps(run.step, plan.profiled, path)
        overlap[name] = [row | {"rank": rank} for row in overlap_table(load_trace(path))]
    return {"rank": rank, "world_size": world_size, "threads": torch.get_num_threads(), "plan": asdict(plan),
            "medians_s": medians, "rounds_s": rounds, "finish_ms_rounds": finish, "numels": numels, "overlap": overlap}


# ------------------------------------------------------------------------------------------------
# The driver: launch, combine both ranks' notes, write the results


def block_medians(per_rank: list[list[float]]) -> list[float]:
    """The median of each block of consecutive rounds, on every rank (`per_rank`: each rank's values, round by
    round): BLOCKS a rank (the rounds, when fewer), so that one stray round decides nothing."""
    medians = []
    for rounds in per_rank:
        size = max(1, len(rounds) // BLOCKS)
        medians += [statistics.median(rounds[i:i + size]) for i in range(0, len(rounds) - size + 1, size)]
    return medians


def step_verdict(level: dict, against: dict) -> str:
    """'slower', 'faster' or 'no clear winner': verdict_over_repeats on both ranks' block medians."""
    return verdict_over_repeats(block_medians(level["step_ms_rounds"]), block_medians(against["step_ms_rounds"]),
                                higher_is_faster=False)


def wait_verdict(level: dict, against: dict) -> str | None:
    """'shorter', 'longer' or 'no clear difference' for finish(), by step_verdict's rule; None when the results
    keep no finish() rounds (scratch.json measured before they were recorded)."""
    if not (level.get("finish_ms_rounds") and against.get("finish_ms_rounds")):
        return None
    verdict = verdict_over_repeats(block_medians(level["finish_ms_rounds"]), block_medians(against["finish_ms_rounds"]),
                                   higher_is_faster=False)
    return {"faster": "shorter", "slower": "longer"}.get(verdict, "no clear difference")


def analyse(notes: list[dict]) -> dict:
    """scratch.json's content (without provenance) from both ranks' notes."""
    first = notes[0]
    base = first["medians_s"][BASE]
    levels = []
    for name in LEVELS:
        rows = [row for note in notes for row in note["overlap"][name]]
        numels, finish = first["numels"][name], first["finish_ms_rounds"][name]
        levels.append({"name": name, "step_ms": first["medians_s"][name] * 1e3,
                       "step_ms_per_rank": [note["medians_s"][name] * 1e3 for note in notes],
                       "step_ms_rounds": [[t * 1e3 for t in note["rounds_s"][name]] for note in notes],
                       "over_torch_ddp": first["medians_s"][name] / base,
                       "finish_ms": None if finish is None else statistics.median(finish),
                       "finish_ms_rounds": None if finish is None else [n["finish_ms_rounds"][name] for n in notes],
                       "allreduces": len(numels), "numels": numels,
                       "same_allreduces_on_every_rank": all(note["numels"][name] == numels for note in notes),
                       "overlapped_share": overlapped_share(rows), "overlap_rows": rows})
    for level in levels:
        level["vs_torch_ddp"] = None if level["name"] == BASE else step_verdict(level, levels[0])
    return {
        "config": {"world_size": first["world_size"], "threads_per_rank": first["threads"],
                   "batch_size_per_rank": TrainConfig.batch_size, "block_size": TrainConfig.block_size,
                   "small_cap_mb": SMALL_CAP_MB, "plan": first["plan"]},
        "gradient_elements": sum(levels[0]["numels"]),
        "levels": levels,
        "method": {
            "step_ms": "rank 0's median over the timed rounds; each round steps every level once, in turn "
                       "(interleaved: the same machine load for all); over_torch_ddp: that median over torch "
                       "DDP's (median against median)",
            "step_ms_rounds": "every rank's step times, round by round (ms)",
            "vs_torch_ddp": f"verdict_over_repeats on the median steps of {BLOCKS} blocks of consecutive rounds "
                            "per rank, both ranks, against torch DDP's: 'slower' or 'faster' when the two sets do "
                            "not overlap (min-max), else 'no clear winner'",
            "finish_ms": "rank 0's median of finish(), the wait after backward for the all-reduces "
                         "(none for torch's DDP, which waits inside backward)",
            "finish_ms_rounds": "every rank's finish() round by round (ms), as step_ms_rounds",
            "allreduces": "one step's all-reduces: torch DDP's rebuilt buckets (its logging data), or the "
                          "level's dist.all_reduce calls (AllReduceRecorder)",
            "overlapped_share": "profiler traces of both ranks: all-reduce time while an autograd node ran, "
                                "over all-reduce time (measure.trace)",
        },
    }


def measure(out: Path, plan: Plan, corpus_dir: Path, echo, repeats: int | None = None) -> dict:
    """Both ranks' notes, then scratch.json's content; `repeats`: the timed rounds, instead of the plan's."""
    plan = replace(plan, repeats=repeats) if repeats else plan
    with tempfile.TemporaryDirectory() as tmp:
        return analyse(relaunch(MEASUREMENT, plan, corpus_dir, Path(tmp), timeout=900, echo=echo))


def by_name(results: dict) -> dict[str, dict]:
    return {level["name"]: level for level in results["levels"]}


def findings(results: dict) -> list[Finding]:
    """The headline numbers: each level's step against torch's DDP, the all-reduces, the overlap at the small cap."""
    levels, small = by_name(results), f"{SMALL_CAP_MB:g} MiB"
    rounds = results["config"]["plan"]["repeats"]
    records = [Finding(f"{KEYS[name]}_over_torch_ddp", level["over_torch_ddp"],
                       "ratio", f"rank 0's median step of {name} over torch DDP's, {rounds} interleaved rounds "
                       f"({plural(level['allreduces'], 'all-reduce')} per step against {levels[BASE]['allreduces']})")
               for name, level in levels.items() if name != BASE]
    return records + [
        Finding("allreduces_per_parameter", levels["NaiveDDP"]["allreduces"], "all-reduces per step",
                "NaiveDDP and OverlappedDDP: one per parameter with a gradient"),
        Finding("allreduces_torch_ddp_small_cap", levels[f"torch DDP, {small}"]["allreduces"], "all-reduces per step",
                f"torch's DDP at bucket_cap_mb={SMALL_CAP_MB:g} (a bucket closes once it reaches the cap)"),
        Finding("allreduces_bucketed_small_cap", levels[f"BucketedDDP, {small}"]["allreduces"], "all-reduces per step",
                f"BucketedDDP at bucket_cap_mb={SMALL_CAP_MB:g} (a bucket holds at most the cap)"),
        Finding("overlapped_share_overlapped", levels["OverlappedDDP"]["overlapped_share"],
                "fraction of all-reduce time", "OverlappedDDP's all-reduce time that ran while backward computed"),
        Finding("overlapped_share_bucketed_small_cap", levels[f"BucketedDDP, {small}"]["overlapped_share"],
                "fraction of all-reduce time", f"the same for BucketedDDP at {small}"),
        Finding("overlapped_share_torch_ddp_small_cap", levels[f"torch DDP, {small}"]["overlapped_share"],
                "fraction of all-reduce time", f"the same for torch's DDP at {small}"),
    ]


def plot(results: dict, out: Path) -> None:
    """Each level's median step over torch DDP's (rank 0's), annotated with its all-reduces and their overlap."""
    import matplotlib.pyplot as plt

    from matplotlib.patches import Patch

    levels = results["levels"]
    y = range(len(levels))[::-1]  # torch's DDP on top
    fig, ax = plt.subplots(figsize=(11, 4.8))
    torch_color, yours_color = "#4c72b0", "#dd8452"
    colors = [torch_color if level["name"].startswith("torch") else yours_color for level in levels]
    ax.barh(list(y), [level["over_torch_ddp"] for level in levels], color=colors)
    ax.axvline(1, color="0.3", linestyle="--", linewidth=1)
    right = max(1.0, *(level["over_torch_ddp"] for level in levels))
    for row, level in zip(y, levels):  # the note starts right of the bar and of the dashed line
        ax.text(max(1.0, level["over_torch_ddp"]) + 0.02 * right, row,
                f"{level['over_torch_ddp']:.2f}x ({level['step_ms']:.1f} ms): {level['allreduces']} all-reduce"
                f"{'s' if level['allreduces'] != 1 else ''} per step, {level['overlapped_share']:.0%} overlapped "
                "backward", va="center", fontsize=9)
    ax.legend(handles=[Patch(color=torch_color, label="torch's DDP (C++ reducer)"),
                       Patch(color=yours_color, label="notebook 15's levels (Python)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8)
    ax.set_yticks(list(y), [level["name"] for level in levels])
    ax.set_xlim(0, 1.9 * right)
    ax.set_xlabel("rank 0's median step over torch DDP's (default caps); dashed: equal")
    config, prov = results["config"], results["provenance"]
    ax.set_title(f"DDP from scratch against torch's: {config['world_size']} gloo ranks x "
                 f"{plural(config['threads_per_rank'], 'thread')}, {config['plan']['repeats']} interleaved rounds, "
                 f"{prov.cores} logical CPUs", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


# ------------------------------------------------------------------------------------------------
# What the notebook shows


def what_ran(results: dict) -> str:
    """The ranks, threads and plan of the run, for its provenance line."""
    config, plan = results["config"], results["config"]["plan"]
    return (f"{config['world_size']} ranks x {plural(config['threads_per_rank'], 'thread')}; "
            f"{len(results['levels'])} levels stepped in turn, {plan['repeats']} rounds after {plan['warmup']} warm-up rounds; "
            f"{plural(plan['profiled'], 'profiled step')} each")


def _sizes(numels: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in numels) if len(numels) <= 6 else (
        f"{min(numels):,} to {max(numels):,}, {sum(numels):,} in all")


def finish_shown(level: dict) -> str:
    """A level's median finish() in ms, '-' for torch's DDP (no finish(): it waits inside backward)."""
    return "-" if level["finish_ms"] is None else f"{level['finish_ms']:.1f}"


def table(results: dict) -> str:
    """One row per level: rank 0's median step (ms), its ratio to torch DDP's (default caps), the verdict against
    it over both ranks' rounds, rank 0's median finish() (ms), all-reduces, overlap."""
    rows = [f"{'level':<22} {'step ms':>8} {'/ torch DDP':>11} {'vs torch DDP':>15} {'finish() ms':>11} "
            f"{'all-reduces':>11} {'overlapped':>10}"]
    for level in results["levels"]:
        rows.append(f"{level['name']:<22} {level['step_ms']:8.1f} {level['over_torch_ddp']:11.2f} "
                    f"{level['vs_torch_ddp'] or '-':>15} {finish_shown(level):>11} {level['allreduces']:11} "
                    f"{level['overlapped_share']:10.0%}")
    return "\n".join(rows)


def allreduce_table(results: dict) -> str:
    """One row per level: the all-reduces of one step and their sizes (float32 elements), the same on every rank."""
    rows = [f"{'level':<22} {'all-reduces':>11}  sizes (float32 elements), in launch order"]
    for level in results["levels"]:
        rows.append(f"{level['name']:<22} {level['allreduces']:11}  {_sizes(level['numels'])}")
    same = all(level["same_allreduces_on_every_rank"] for level in results["levels"])
    rows.append(f"every level's gradients: {results['gradient_elements']:,} elements; "
                f"the same all-reduces on every rank: {same}")
    return "\n".join(rows)


def backward_samples(level: dict) -> list[float]:
    """Per profiled (rank, step), the time an autograd node ran (hooks included), ms."""
    return list({(row["rank"], row["step"]): row["backward_ms"] for row in level["overlap_rows"]}.values())


def profiled_backward_ms(level: dict) -> float:
    """The median, over the profiled steps of both ranks, of the time an autograd node ran (hooks included)."""
    return statistics.median(backward_samples(level))


def compared_text(results: dict) -> str:
    """What the table shows, level against level, in sentences with this run's numbers."""
    levels, small = by_name(results), f"{SMALL_CAP_MB:g} MiB"
    naive, over, buck = levels["NaiveDDP"], levels["OverlappedDDP"], levels["BucketedDDP"]
    t_small, b_small = levels[f"torch DDP, {small}"], levels[f"BucketedDDP, {small}"]
    over_verdict, backward = step_verdict(over, naive), (profiled_backward_ms(over), profiled_backward_ms(naive))
    wait = wait_verdict(over, naive)
    overlap = (f"- OverlappedDDP against NaiveDDP, its {over['allreduces']} all-reduces launched inside backward: "
               f"finish() waited {over['finish_ms']:.1f} against {naive['finish_ms']:.1f} ms ("
               + (f"{wait} over both ranks' block medians" if wait else "rank 0's medians; no rounds recorded, so "
                  "no verdict")
               + f"), the step took {over['step_ms']:.1f} against {naive['step_ms']:.1f} ms ({over_verdict} over both "
               f"ranks' block medians), backward in the profiled steps {backward[0]:.1f} against {backward[1]:.1f} ms.")
    if wait == "shorter" and over_verdict != "faster":  # the wait moved, the step did not gain
        overlap += " Launching the all-reduces inside backward shortened the wait after it, not the step."
    samples = backward_samples(over), backward_samples(naive)
    apart = {"slower": "longer", "faster": "shorter"}.get(  # the lab's noise rule: every sample beyond every one
        verdict_over_repeats(*samples, higher_is_faster=False))
    overlap += (f" Backward was {apart} in every profiled (step, rank) than NaiveDDP's in any ({len(samples[0])} "
                f"against {len(samples[1])}): a correlation, not a measured cause." if apart else
                " The profiled backward times overlap NaiveDDP's: no clear difference.")
    return "\n".join([
        f"- The same {results['gradient_elements']:,} gradient elements: NaiveDDP's finish() "
        f"({plural(naive['allreduces'], 'all-reduce')}, after backward) waited {naive['finish_ms']:.1f} ms, "
        f"BucketedDDP's ({plural(buck['allreduces'], 'all-reduce')}) {buck['finish_ms']:.1f} ms.",
        overlap,
        f"- {b_small['name']} ({plural(b_small['allreduces'], 'all-reduce')}) against {t_small['name']} "
        f"({t_small['allreduces']}), not the table's {BASE}: {step_verdict(b_small, t_small)} over "
        f"both ranks' block medians (median step {b_small['step_ms']:.1f} against {t_small['step_ms']:.1f} ms).",
    ])


def report(results: dict) -> str:
    """What `python -m` prints: the timing table, then the all-reduces."""
    return what_ran(results) + "\n" + table(results) + "\n" + allreduce_table(results)


MEASUREMENT = Measurement("scratch", "DDP from scratch: notebook 15's levels against torch's DDP, step time and "
                          "all-reduces", "15-ddp-from-scratch.ipynb", (PLOT_NAME,), measure, findings, plot, report,
                          Plan.quick.__doc__, Plan, worker, options=lambda p: p.add_argument(
                              "--repeats", type=positive_int, help=f"timed rounds (default {Plan.repeats}; --quick: "
                              f"{Plan.quick().repeats})"))
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
