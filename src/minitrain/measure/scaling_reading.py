"""What notebook 08 reads from scaling_matrix.json: its tables and generated sentences."""

import statistics

from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.verdict import VERDICTS, verdict_over_repeats
from minitrain.measure.scaling_matrix import params_label
from minitrain.measure.scaling_runs import ALL_CORES, ONE_THREAD, PINNED, TWO_PROCS


def what_ran(results: dict) -> str:
    """How many runs, how long, and the machine's load before and after, for the provenance line."""
    load = results["load_average"]
    return (f"{len(results['runs'])} runs, {plural(results['repeats'], 'repeat')} per point, {results['wall_s'] / 60:.0f} "
            f"minutes; load average before {load['before'][0]:.1f}, after {load['after'][0]:.1f}")


RATIO_COLUMNS = (("2x1 / 1xall", "speedup_2proc_over_1proc_allcores"),
                 ("2x1 / 1x1", "speedup_2proc_over_1proc_1thread"),
                 ("pinned / 2x1", "pinned_over_2proc"))


def ratio_table(results: dict) -> str:
    """Ratios of median tokens/s per model size, weak (w) and strong (s), from results["summary"]."""
    summ = results["summary"]
    lines = ["tokens/s ratios, medians of the repeats (w: weak, s: strong scaling); 2x1: 2 processes x 1 "
             "thread, 1xall: 1 process x all cores, 1x1: 1 process x 1 thread, pinned: 2 processes on 1 core",
             f"{'model size':<16}" + "".join(f"{title:>22}" for title, _ in RATIO_COLUMNS)]
    for row in summ["per_size"]:
        lines.append(f"{params_label(row['params']):<16}" + "".join(
            "  ".join(f"{s[0]} {row[key][s]:.2f}x" for s in summ["scalings"] if row[key][s] is not None).rjust(22)
            for _, key in RATIO_COLUMNS))
    return "\n".join(lines)


def repeats_of(results: dict, config: str, scaling: str, params: int) -> list[dict]:
    """The runs (repeats) of one point of the matrix."""
    return [r for r in results["runs"] if r["config"] == config and scaling in r["scaling"] and r["params"] == params]


def breakdown_median(results: dict, config: str, scaling: str, params: int, part: str) -> float:
    """The median over a point's repeats of one `step_breakdown_ms` part ('all-reduce', ...) or of the step."""
    runs = repeats_of(results, config, scaling, params)
    return statistics.median(r["step_ms"]["median"] if part == "step" else r["step_breakdown_ms"][part] for r in runs)


def largest_share(results: dict, config: str, scaling: str) -> tuple[int, str]:
    """The model size with the largest all-reduce share (medians of the repeats), and whether its
    repeats' shares lie apart from (above) every other size's or within some other size's."""
    shares = {n: [r["allreduce_share"] for r in repeats_of(results, config, scaling, n)]
              for n in results["summary"]["sizes"]}
    shares = {n: v for n, v in shares.items() if v}
    peak = max(shares, key=lambda n: statistics.median(shares[n]))
    within = [n for n in shares if n != peak and verdict_over_repeats(shares[peak], shares[n]) == "no clear winner"]
    return peak, ("apart from every other size's repeats" if not within else
                  "within the repeats of " + ", ".join(params_label(n) for n in within))


def pinned_text(results: dict) -> str:
    """The all-reduce's time and share per model size, 2 processes x 1 thread and pinned, as sentences."""
    sizes, summ = results["summary"]["sizes"], results["summary"]["per_size"]
    strong = "strong" if "strong" in results["summary"]["scalings"] else results["summary"]["scalings"][0]
    lines = []
    for config, key in ((TWO_PROCS, "allreduce_share_2proc"), (PINNED, "allreduce_share_pinned")):
        if not repeats_of(results, config, strong, sizes[0]):
            continue
        label = next(c["label"] for c in results["configurations"] if c["name"] == config)
        hook = [breakdown_median(results, config, strong, n, "all-reduce") for n in sizes]
        step = [breakdown_median(results, config, strong, n, "step") for n in sizes]
        peak, apart = largest_share(results, config, strong)
        share = next(row[key][strong] for row in summ if row["params"] == peak)
        lines.append(f"{label}, {strong} scaling (medians over the repeats): the hook took "
                     + ", ".join(f"{ms:.1f}" for ms in hook) + " ms per step at "
                     + ", ".join(params_label(n) for n in sizes)
                     + f" parameters, while the step grew from {step[0]:.0f} to {step[-1]:.0f} ms; the share peaked at "
                     f"{share:.0%} at {params_label(peak)}, {apart}.")
    if len(sizes) > 1 and repeats_of(results, TWO_PROCS, "weak", sizes[1]) and repeats_of(results, TWO_PROCS, strong, sizes[1]):
        n = sizes[1]
        lines.append(f"At {params_label(n)}, 2 processes x 1 thread: the hook took "
                     f"{breakdown_median(results, TWO_PROCS, 'weak', n, 'all-reduce'):.1f} ms per step in weak scaling "
                     f"and {breakdown_median(results, TWO_PROCS, strong, n, 'all-reduce'):.1f} ms in strong scaling, "
                     f"against steps of {breakdown_median(results, TWO_PROCS, 'weak', n, 'step'):.0f} and "
                     f"{breakdown_median(results, TWO_PROCS, strong, n, 'step'):.0f} ms.")
    return " ".join(lines)


def takeaway(results: dict) -> str:
    """The notebook's takeaway: the sheet's question per size and scaling, with verdicts over the repeats."""
    summ, sizes = results["summary"], results["summary"]["sizes"]
    labels = {c["name"]: c["label"] for c in results["configurations"]}
    ratio = lambda key, n, s: next(row[key][s] for row in summ["per_size"] if row["params"] == n)  # noqa: E731
    tps = lambda config, s, n: [r["tokens_per_sec"]["median"] for r in repeats_of(results, config, s, n)]  # noqa: E731
    first, last = sizes[0], sizes[-1]
    key = "speedup_2proc_over_1proc_allcores"
    lines = [f"- In this matrix ({summ['cores']} logical CPUs), for the lab's {params_label(first)}-parameter model, "
             f"{labels[TWO_PROCS]} made {ratio(key, first, 'weak'):.2f}x the tokens/s of {labels[ALL_CORES]} in weak "
             f"scaling ({ratio(key, first, 'strong'):.2f}x in strong); for the {params_label(last)} model, "
             f"{ratio(key, last, 'weak'):.2f}x ({ratio(key, last, 'strong'):.2f}x) (medians of the repeats)."]
    crossed = summ["crossings"]
    if crossed:
        lines.append("- The order changes " + "; ".join(
            f"{labels[c['faster_before']]} -> {labels[c['faster_after']]} between {params_label(c['between_params'][0])} "
            f"and {params_label(c['between_params'][1])} "
            f"({c['scaling']}, {'apart' if c['separated'] else 'within the repeats'})" for c in crossed)
            + (": no clear crossing." if not any(c["separated"] for c in crossed) else "."))
    else:
        lines.append("- The order of the two never changes between model sizes.")
    by_size = lambda config, baseline, s: {  # noqa: E731 (sizes by verdict_over_repeats, config against baseline)
        verdict: [params_label(n) for n in sizes if verdict_over_repeats(tps(config, s, n), tps(baseline, s, n)) == verdict]
        for verdict in VERDICTS}
    verdicts = []
    for s in summ["scalings"]:
        by = by_size(TWO_PROCS, ALL_CORES, s)
        verdicts.append(f"{s} scaling: 2 processes faster at {', '.join(by['faster']) or 'no size'}, slower at "
                        f"{', '.join(by['slower']) or 'no size'}, no clear winner at {', '.join(by['no clear winner']) or 'no size'}")
    lines.append("- Every repeat above or below every repeat of the other side (`verdict_over_repeats`): "
                  + "; ".join(verdicts) + ".")
    pinned = summ["ranges"]["pinned_over_2proc"]["weak"]
    alone = summ["ranges"]["pinned_over_1proc_1thread"]["weak"]
    if pinned and alone:
        by = by_size(PINNED, ONE_THREAD, "weak")
        real = ("slower than one process on one core at every size, every repeat below, as the sheet's \"contending "
                "for the same cores\" predicts" if len(by["slower"]) == len(sizes) else
                f"against one process on one core, slower at {', '.join(by['slower']) or 'no size'}, faster at "
                f"{', '.join(by['faster']) or 'no size'}, no clear winner at {', '.join(by['no clear winner']) or 'no size'} "
                "(`verdict_over_repeats`)")
        lines.append(f"- Pinned to one core, the two ranks made {pinned[0]:.2f}-{pinned[1]:.2f}x the tokens/s of two "
                     f"unpinned ones, and {alone[0]:.2f}-{alone[1]:.2f}x of one process on one core (weak scaling, range "
                     f"of the medians' ratios over the sizes): {real}.")
    shares = []
    for config in (TWO_PROCS, PINNED):
        for s in summ["scalings"]:
            if repeats_of(results, config, s, first):
                peak, apart = largest_share(results, config, s)
                share = statistics.median(r["allreduce_share"] for r in repeats_of(results, config, s, peak))
                shares.append(f"{labels[config]}, {s}: at most {share:.0%}, at {params_label(peak)} ({apart})")
    lines.append("- The all-reduce's share of a step (comm hook, waiting for the other rank included): "
                 + "; ".join(shares) + ".")
    return "\n".join(lines)


def affinity_table(results: dict) -> str:
    """Per configuration, what its ranks recorded in run.json: the cores they were allowed on and
    their torch threads, over every run and repeat."""
    lines = []
    for config in results["configurations"]:
        ranks = [rank for run in results["runs"] if run["config"] == config["name"] for rank in run["ranks"]]
        cores = sorted({str(rank["affinity"]) for rank in ranks})
        threads = sorted({rank["threads"] for rank in ranks})
        lines.append(f"{config['label']:<30} {len(ranks):>3} ranks: allowed on cores {' or '.join(cores)}; "
                     f"torch threads {threads}")
    return "\n".join(lines)


def demo_summary(run: dict) -> str:
    """A run's command, throughput, all-reduce share and wall time (these vary from run to run)."""
    return (f"{run['command']}\n{run['tokens_per_sec']['median']:,.0f} tokens/s, all-reduce "
            f"{run['allreduce_share']:.0%} of the step, {run['wall_s']:.0f} s including start-up")


def ranks_table(run: dict) -> str:
    """What each rank of a run recorded: the cores it was allowed on, its torch threads, OMP_NUM_THREADS."""
    return "\n".join(f"rank {rank['rank']}: allowed on cores {rank['affinity']}, {plural(rank['threads'], 'torch thread')}, "
                     f"OMP_NUM_THREADS={rank['omp_num_threads']}" for rank in run["ranks"])
