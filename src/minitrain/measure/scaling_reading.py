"""What notebook 08 reads from scaling_matrix.json: its tables and generated sentences."""

import statistics

import torch.distributed as dist

from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.verdict import chance_of_separation, verdict_over_repeats
from minitrain.measure.scaling_matrix import params_label
from minitrain.measure.scaling_runs import ALL_CORES, ONE_THREAD, PINNED, TWO_PROCS
from minitrain.train import build_model_for_corpus


def what_ran(results: dict) -> str:
    """How many runs, how long, and the machine's load before and after, for the provenance line."""
    load = results["load_average"]
    return (f"{len(results['runs'])} runs, {plural(results['repeats'], 'repeat')} per point, {results['wall_s'] / 60:.0f} "
            f"minutes; load average (the matrix's own runs count) before {load['before'][0]:.1f}, after "
            f"{load['after'][0]:.1f}")


RATIO_COLUMNS = (("2 procs / 1 proc all cores", "speedup_2proc_over_1proc_allcores"),
                 ("2 procs / 1 proc 1 thread", "speedup_2proc_over_1proc_1thread"),
                 ("pinned / 2 procs", "pinned_over_2proc"),
                 ("pinned / 1 proc 1 thread", "pinned_over_1proc_1thread"))


def ratio_table(results: dict) -> str:
    """Ratios of median tokens/s per model size, weak (w) and strong (s), from results["summary"]."""
    summ = results["summary"]
    lines = ["tokens/s ratios, medians of the repeats (w weak, s strong scaling)",
             f"{'model size':<12}" + "".join(f"{title:>28}" for title, _ in RATIO_COLUMNS)]
    for row in summ["per_size"]:
        lines.append(f"{params_label(row['params']):<12}" + "".join(
            "  ".join(f"{s[0]} {row[key][s]:.2f}x" for s in summ["scalings"] if row[key][s] is not None).rjust(28)
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


FIRST_BUCKET_BYTES = dist._DEFAULT_FIRST_BUCKET_BYTES  # DDP's cap for its first bucket when bucket_cap_mb is default
BUCKET_BYTES = 25 * 1024 * 1024  # DDP's bucket_cap_mb default, for every later bucket
MiB = 1024 * 1024


def ddp_buckets(model_config: dict, block_size: int, recorded: dict[tuple, int] | None = None) -> tuple[int, int | None, bool]:
    """(fewest, most or None for no bound, recorded) buckets DDP's default caps make of a model's float32
    gradients in any arrival order; where the bytes leave a range, the count `recorded` holds for this
    (n_layer, n_head, n_embd, block_size), as notebook 10 records it."""
    model, _ = build_model_for_corpus(DEFAULT_CORPUS_DIR, block_size, **model_config)
    sizes = [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad]
    total, biggest = sum(sizes), max(sizes)
    # a bucket closes once it holds at least its cap, so the first holds less than its cap + the biggest tensor
    fewest = 1 if total < FIRST_BUCKET_BYTES + biggest else 2
    most = 1 if total < FIRST_BUCKET_BYTES else 2 if total < FIRST_BUCKET_BYTES + BUCKET_BYTES else None
    key = (model_config["n_layer"], model_config["n_head"], model_config["n_embd"], block_size)
    if fewest != most and recorded and key in recorded:
        return recorded[key], recorded[key], True
    return fewest, most, False


def bucket_label(buckets: tuple[int, int | None, bool]) -> str:
    """'2', '1 or 2', '2 or more', or '1*' for a count recorded by notebook 10."""
    fewest, most, recorded = buckets
    return (f"{fewest}*" if recorded else str(fewest) if fewest == most else
            f"{fewest} or more" if most is None else f"{fewest} or {most}")


def curves(results: dict) -> list[tuple[str, str]]:
    """The (configuration, scaling) pairs of 2-process runs the matrix holds."""
    first = results["summary"]["sizes"][0]
    return [(config, s) for config in (TWO_PROCS, PINNED) for s in results["summary"]["scalings"]
            if repeats_of(results, config, s, first)]


def hook_table(results: dict, buckets: dict[int, tuple]) -> str:
    """Per model size: the gradients, DDP's buckets, and each 2-process curve's comm-hook time per step,
    with its growth from the first size to the second and the size where its share of the step peaks."""
    sizes, labels = results["summary"]["sizes"], {c["name"]: c["label"] for c in results["configurations"]}
    grads = [4 * n / MiB for n in sizes]  # float32
    growth = f"{params_label(sizes[1])} / {params_label(sizes[0])}" if len(sizes) > 1 else ""
    lines = ["comm hook, ms per step (medians of the repeats)",
             f"{'':<38}" + "".join(f"{params_label(n):>9}" for n in sizes) + f"{growth:>16}{'share peak':>12}",
             f"{'gradients, MiB':<38}" + "".join(f"{g:9.2f}" for g in grads)
             + (f"{grads[1] / grads[0]:>15.1f}x" if len(sizes) > 1 else ""),
             f"{'DDP buckets':<38}" + "".join(f"{bucket_label(buckets[n]):>9}" for n in sizes)]
    for config, s in curves(results):
        hook = [breakdown_median(results, config, s, n, "all-reduce") for n in sizes]
        lines.append(f"{labels[config] + ', ' + s:<38}" + "".join(f"{ms:9.1f}" for ms in hook)
                     + (f"{hook[1] / hook[0]:>15.1f}x" if len(sizes) > 1 else "")
                     + f"{params_label(largest_share(results, config, s)[0]):>12}")
    if any(b[2] for b in buckets.values()):
        lines.append("* recorded by notebook 10 for the same model; the others follow from the bytes "
                     "under DDP's default caps")
    return "\n".join(lines)


def strong_against_weak(results: dict) -> str:
    """A sentence: at how many sizes strong scaling's share of the step is above weak's, by median and with every
    repeat above every one of weak's (verdict_over_repeats), per 2-process curve; '' without both scalings."""
    found = curves(results)
    shares = lambda c, s, n: [r["allreduce_share"] for r in repeats_of(results, c, s, n)]  # noqa: E731
    both = {(c, name): [n for n in results["summary"]["sizes"] if shares(c, "strong", n) and shares(c, "weak", n)]
            for c, name in ((TWO_PROCS, "unpinned"), (PINNED, "pinned"))
            if (c, "weak") in found and (c, "strong") in found}
    if not both:
        return ""
    larger = {key: sum(statistics.median(shares(key[0], "strong", n)) > statistics.median(shares(key[0], "weak", n))
                       for n in sizes) for key, sizes in both.items()}
    apart = {key: sum(verdict_over_repeats(shares(key[0], "strong", n), shares(key[0], "weak", n)) == "faster"
                      for n in sizes) for key, sizes in both.items()}  # "faster": every strong share above every weak
    counts = lambda by: " and ".join(f"{by[key]} of {len(sizes)}{' sizes' * (i == 0)} {key[1]}"  # noqa: E731
                                     for i, (key, sizes) in enumerate(both.items()))
    everywhere = all(larger[key] == len(sizes) for key, sizes in both.items())
    return (" Strong scaling halves each rank's batch but not its gradients" + (": " if everywhere else "; ")
            + "its median share is the larger at " + ("every size" if everywhere else counts(larger))
            + f", every repeat above weak's at {counts(apart)}.")


def hook_reading(results: dict, buckets: dict[int, tuple]) -> str:
    """One paragraph on the hook table: growth against the bytes, pinned and not, where the share peaks."""
    sizes, found = results["summary"]["sizes"], curves(results)
    if len(sizes) < 2 or not found:
        return ""
    n0, n1 = sizes[0], sizes[1]
    growth = {c: breakdown_median(results, *c, n1, "all-reduce") / breakdown_median(results, *c, n0, "all-reduce")
              for c in found}
    spans = []
    for config, name in ((TWO_PROCS, "unpinned"), (PINNED, "pinned")):
        mine = [g for (c, _), g in growth.items() if c == config]
        if mine:
            low, high = f"{min(mine):.1f}", f"{max(mine):.1f}"
            spans.append(f"{low}x {name}" if low == high else f"{low}-{high}x {name}")
    peaks = {largest_share(results, *c)[0] for c in found}
    apart = all(largest_share(results, *c)[1].startswith("apart") for c in found)
    split = next((n for n in sizes if buckets[n][0] >= 2), None)
    if len(peaks) == 1:
        peak = peaks.pop()
        where = (f"The share peaks at {params_label(peak)} in all {len(found)} curves"
                 + (", each apart from every other size's repeats." if apart else "."))
    else:
        where = "The share peaks at " + ", ".join(sorted(params_label(p) for p in peaks)) + ", by curve."
    return (f"From {params_label(n0)} to {params_label(n1)} the gradients grow {n1 / n0:.1f}x and the hook time "
            + " and ".join(spans) + f". {where}{strong_against_weak(results)} The hook times each bucket from its "
            "launch to the end of its all-reduce: "
            + (f"from {params_label(split)} on DDP makes more than one bucket, and " if split else "")
            + "a bucket launched while backward still runs also counts backward's work on the shared cores; the "
            "matrix records no traces to split the two.")


def verdict_table(results: dict) -> str:
    """Per model size, `verdict_over_repeats` (every repeat above, below, or neither) of 2 processes x 1
    thread against 1 process on all cores, per scaling, and of the pinned pair against 1 process x 1 thread."""
    sizes, labels = results["summary"]["sizes"], {c["name"]: c["label"] for c in results["configurations"]}
    tps = lambda config, s, n: [r["tokens_per_sec"]["median"] for r in repeats_of(results, config, s, n)]  # noqa: E731
    rows = [(f"2 processes x 1 thread vs {labels[ALL_CORES]}, {s}", TWO_PROCS, ALL_CORES, s)
            for s in results["summary"]["scalings"]]
    rows.append((f"pinned vs {labels[ONE_THREAD]}, weak", PINNED, ONE_THREAD, "weak"))
    width = max(len(title) for title, *_ in rows) + 2
    lines = ["tokens/s, every repeat against every repeat (`verdict_over_repeats`)",
             f"{'':<{width}}" + "".join(f"{params_label(n):>17}" for n in sizes)]
    cells = []
    for title, config, baseline, s in rows:
        if all(tps(config, s, n) and tps(baseline, s, n) for n in sizes):
            lines.append(f"{title:<{width}}" + "".join(f"{verdict_over_repeats(tps(config, s, n), tps(baseline, s, n)):>17}"
                                                  for n in sizes))
            cells += [chance_of_separation(len(tps(config, s, n)), len(tps(baseline, s, n))) for n in sizes]
    if cells:  # each cell's verdict can be chance: say how often, and how many of the table's that makes
        lines.append(f"with no real difference, repeats this few lie wholly apart by chance {max(cells):.0%} of the "
                     f"time or less: about {sum(cells):.1f} of these {len(cells)} cells")
    lines += like_for_like(results)
    labels_of = lambda c: f"{labels[c['faster_before']]} -> {labels[c['faster_after']]} between "  # noqa: E731
    crossings = results["summary"]["crossings"]
    clear = [labels_of(c) + f"{params_label(c['between_params'][0])} and {params_label(c['between_params'][1])} "
             f"({c['scaling']})" for c in crossings if c["separated"]]
    lines.append(f"crossings (the faster configuration changes between neighbouring sizes, by median): {len(crossings)}; "
                 "with every repeat apart at both sizes: " + ("; ".join(clear) if clear else "none"))
    return "\n".join(lines)


def like_for_like(results: dict) -> list[str]:
    """What each scaling's 2-process against 1-process-on-all-cores verdict compares: the weak one mixes processes
    against threads with the size of each core's operations, the strong one does not; its verdicts counted."""
    config = next(c for c in results["configurations"] if c["name"] == ALL_CORES)
    threads, weak = config["threads"] or results["cores"], results["weak_batch_per_rank"]
    lines = []
    if "weak" in results["summary"]["scalings"]:
        lines.append(f"weak mixes processes against threads with op size: each process computes on {weak} sequences, "
                     f"1 process splits {weak} among {threads} threads")
    if "strong" in results["summary"]["scalings"]:
        sizes = results["summary"]["sizes"]
        tps = lambda c, n: [r["tokens_per_sec"]["median"] for r in repeats_of(results, c, "strong", n)]  # noqa: E731
        verdicts = [verdict_over_repeats(tps(TWO_PROCS, n), tps(ALL_CORES, n)) for n in sizes
                    if tps(TWO_PROCS, n) and tps(ALL_CORES, n)]
        lines.append(f"strong ({results['strong_global_batch']} sequences per step either way) is like for like: "
                     f"2 processes slower at {verdicts.count('slower')}, faster at {verdicts.count('faster')} of "
                     f"{len(verdicts)} sizes")
    return lines


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
