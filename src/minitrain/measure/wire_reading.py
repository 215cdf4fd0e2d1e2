"""What notebook 10 reads from wire.json: its tables and generated sentences."""

import statistics

from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.sittings import sitting_note
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.allreduce import ring_factor

SLOW = 1.5  # a transfer or a benchmark's p95 this many times its reference counts as slow


def what_ran(results: dict) -> str:
    """The ranks and threads of the run, for its provenance line."""
    config = results["config"]
    return f"{config['world_size']} ranks x {plural(config['threads_per_rank'], 'thread')}"


def ddp_bucket_check(results: dict) -> dict[str, bool]:
    """DDP's own record of its buckets: does it list the comm hook's parameters in the same order?"""
    ddp = results["ddp_buckets"]
    same = ddp["params_in_order"] == [name for b in results["buckets"] for name in b["params"]]
    return {f"DDP's own record (bucket sizes {ddp['sizes_bytes']}): same parameters in the same order": same}


def ring_table(gradient_bytes: int, ranks: list[int]) -> str:
    """What each rank sends in a ring all-reduce of `gradient_bytes` for each number of ranks: 2(n-1)/n x."""
    lines = [f"gradient bytes per step: {gradient_bytes:,} (float32, {gradient_bytes // 4:,} values)"]
    for n in ranks:
        factor = ring_factor(n)
        lines.append(f"ring all-reduce, {n:2d} ranks: each rank sends {factor * gradient_bytes:12,.0f} bytes "
                     f"= {factor:.3f} x the gradients")
    return "\n".join(lines)


def bytes_table(results: dict) -> str:
    """Bytes per step and rank: the ring's theory against the kernel's socket counters."""
    wire = results["bytes_per_step"]
    measured = wire["measured"]
    lines = [f"theory, per rank per step: {wire['ring_theory_per_rank']:,.0f} bytes"]
    if measured["sent_per_rank"] is None:
        return "\n".join(lines + [measured["source"]])
    for rank, (sent, again, received) in enumerate(zip(measured["sent_per_rank"], measured["retransmitted_per_rank"],
                                                        measured["received_per_rank"])):
        lines.append(f"rank {rank}: sent {sent:,.0f} bytes (plus {again:,.0f} retransmitted), "
                     f"received {received:,.0f}")
    lines.append(f"sent / theory: {measured['sent_over_theory']:.4f}; "
                 f"{measured['overhead_bytes_per_step']:,.0f} bytes a step above the theory")
    return "\n".join(lines)


def allreduce_table(results: dict) -> str:
    """The all-reduce's time per step and rank: in the step against alone, median against median;
    then the in-step time split into waiting and transfer with means (means add up, medians do not)."""
    ar = results["allreduce_ms"]
    in_step, alone = ar["in_step"]["median"], ar["standalone"]
    lines = ["medians, ms per step and rank:",
             f"  in the step (comm hook: bucket ready -> all-reduce done): {in_step:6.2f}  "
             f"(p95 {ar['in_step']['p95']:.2f})",
             f"  alone, the same bytes between barriers:                   {alone:6.2f}",
             f"  in the step / alone:                                      {in_step / alone:5.1f}x",
             f"  in the step, the part after both buckets were ready:      {ar['transfer']['median']:6.2f}"]
    if ar["predicted"] is not None:
        lines.append(f"  the benchmark's alpha-beta fit for these bytes:           {ar['predicted']:6.2f}")
    lines += ["the in-step time split, means over steps and ranks, ms:",
              f"  in the step                              {ar['in_step']['mean']:6.2f}",
              f"  = waiting for the other rank's bucket    {ar['waiting']['mean']:6.2f}  ({ar['waiting_share']:.0%})",
              f"  + transfer, after both were ready        {ar['transfer']['mean']:6.2f}"]
    lines += [f"  rank {r['rank']}: in the step {r['in_step_mean']:.2f}, of which waiting {r['waiting_mean']:.2f}"
              for r in ar["per_rank"]]
    return "\n".join(lines)


def headroom_table(results: dict) -> str:
    """Rank 0's median step with the all-reduce and with the no-op hook, per repeat and overall."""
    head = results["headroom"]
    lines = [f"repeat {r['repeat']}: {r['step_ms_allreduce']:6.1f} ms with all-reduce, {r['step_ms_noop']:6.1f} ms "
             f"with no-op -> communication {r['comm_share']:.0%} of the step" for r in head["repeats"]]
    lines.append(f"median of the repeats: {head['step_ms_allreduce']:.1f} ms against {head['step_ms_noop']:.1f} ms; "
                 f"communication share, the median of the repeats' shares: {head['comm_share']:.0%}")
    return "\n".join(lines)


def overlap_rows_table(results: dict) -> str:
    """Per profiled step and rank: all-reduce time, the part that overlapped backward, its start against
    this rank's backward end, the time the step waited after backward, backward itself (ms); the overlapped share."""
    lines = [f"{'rank':>4} {'step':>4} {'all-reduce ms':>13} {'overlapped ms':>13} {'start ms':>8} "
             f"{'after backward ms':>17} {'backward ms':>11}"]
    lines += [f"{r['rank']:>4} {r['step']:>4} {r['allreduce_ms']:13.2f} {r['overlapped_ms']:13.2f} {r['start_ms']:+8.2f} "
              f"{r['after_backward_ms']:17.2f} {r['backward_ms']:11.2f}" for r in results["overlap"]["rows"]]
    lines.append(f"overlapped share (sum over rows): {results['overlap']['overlapped_share']:.1%}")
    return "\n".join(lines)


def share_word(share: float) -> str:
    """'the smaller part' or 'the larger part' of a whole, for a share of it."""
    return "the smaller part" if share < 0.5 else "the larger part"


def waiting_text(results: dict) -> str:
    """The in-step all-reduce against alone (medians) and its split into waiting and transfer (means), as sentences."""
    ar = results["allreduce_ms"]
    rows, alone = ar["per_step"], ar["standalone"]
    quick = sum(r["transfer_ms"] < SLOW * alone for r in rows)
    return (f"In the step against alone is median against median: {ar['in_step']['median']:.2f} ms against "
            f"{alone:.2f} ms, {ar['in_step_over_standalone']:.1f}x (`in_step_over_standalone` in `wire.json`; the "
            "figure's middle panel shows the two medians and the ratio in its title).\n\n"
            f"**Waiting is {share_word(ar['waiting_share'])}.** A rank waited {ar['waiting']['mean']:.2f} ms of its "
            f"mean {ar['in_step']['mean']:.2f} ms in the step ({ar['waiting_share']:.0%}, means). The transfer after "
            f"both buckets were ready took a median {ar['transfer']['median']:.2f} ms against {alone:.2f} ms "
            f"alone ({ar['transfer']['median'] / alone:.1f}x), mean {ar['transfer']['mean']:.2f} ms, p95 {ar['transfer']['p95']:.2f} ms. Of the {len(rows)} rows "
            f"of `allreduce_ms.per_step` ({len(rows) // results['config']['world_size']} steps x "
            f"{results['config']['world_size']} ranks), {quick} transferred in under {SLOW} times the stand-alone time; "
            f"the others took up to {max(r['transfer_ms'] for r in rows):.1f} ms.")


def latest_start(rows: list[dict]) -> dict:
    """The traced all-reduce that began latest against its own rank's backward end."""
    return max(rows, key=lambda r: r["start_ms"])


def delayed_start_text(results: dict) -> str:
    """The traced all-reduce that began latest after its rank's backward ended, and the other rank's of that step."""
    rows = results["overlap"]["rows"]
    late = latest_start(rows)
    where = f"What the trace shows (section 4, rank {late['rank']}, profiled step {late['step']}): "
    if late["start_ms"] <= 0:
        return where + (f"every traced all-reduce began before its rank's backward ended (the latest "
                        f"{-late['start_ms']:.2f} ms before), so none waited to start.")
    other = [r for r in rows if r["step"] == late["step"] and r["rank"] != late["rank"]]
    # the two ranks' traces have their own clocks: durations compare, intervals across ranks do not
    return (where + f"that all-reduce ran for {late['allreduce_ms']:.2f} ms and ended {late['after_backward_ms']:.2f} "
            f"ms after backward: it began {late['start_ms']:.2f} ms after this rank's backward ended; the trace does "
            "not say what it waited for (gloo's worker, the Python hook, the interpreter's lock)"
            + (f". Rank {other[0]['rank']}'s all-reduce of that step ran for {other[0]['allreduce_ms']:.2f} ms (the "
               "two traces have separate clocks, so they do not say whether it covered that gap)" if other else "")
            + ".")


def slow_transfer_text(results: dict, bench: dict) -> str:
    """The benchmark's own slow tail at the size nearest the gradients, beside this run's, as a sentence."""
    gradient = results["bytes_per_step"]["gradient"]
    row = min(bench["results"], key=lambda r: abs(r["bytes"] - gradient))
    tail = row["p95_ms"] / row["median_ms"]
    transfer = results["allreduce_ms"]["transfer"]
    return " ".join(filter(None, [
        ("The benchmark shows such waits alone too" if tail >= SLOW else
         f"The benchmark alone has no such tail (its p95 within {SLOW}x of its median)")
        + f": notebook 07's p95 at {row['bytes'] / 2**20:.3g} MiB is {row['p95_ms']:.2f} ms against a "
        f"{row['median_ms']:.2f} ms median ({tail:.1f}x), while the transfer here had a p95 of {transfer['p95']:.2f} ms "
        f"against a {transfer['median']:.2f} ms median ({transfer['p95'] / transfer['median']:.1f}x). The 1-minute "
        f"load average this run recorded: {results['provenance'].load_average_1min:.1f}.",
        sitting_note(results, bench)]))


def headroom_verdict(results: dict) -> str:
    """Whether the no-op hook's blocks were faster than the all-reduce's in every repeat, by their ranges."""
    repeats = results["headroom"]["repeats"]
    verdict = verdict_over_repeats([r["step_ms_noop"] for r in repeats], [r["step_ms_allreduce"] for r in repeats],
                                   higher_is_faster=False)
    return {"faster": "every no-op block's median step below every all-reduce block's",
            "slower": "every no-op block's median step above every all-reduce block's",
            "no clear winner": "the two kinds of blocks' ranges overlap: no clear difference"}[verdict]


def headroom_text(results: dict) -> str:
    """The communication share from the no-op hook, the median of the paired repeats' shares, and their range."""
    head = results["headroom"]
    shares = [r["comm_share"] for r in head["repeats"]]
    return (f"The headline share is the median of the paired shares: each of the {len(shares)} repeats gives "
            "1 - noop/allreduce of rank 0's median steps in its two adjacent blocks, and the median of those is "
            f"{head['comm_share']:.0%}; the single repeats range from {min(shares):.0%} to {max(shares):.0%}. Over the "
            f"repeats the median step was {head['step_ms_allreduce']:.1f} ms with the all-reduce against "
            f"{head['step_ms_noop']:.1f} ms with the no-op hook (the figure's right panel draws those two medians; its "
            f"title gives the share); {headroom_verdict(results)}.")


def overlap_text(results: dict) -> str:
    """How much of the all-reduce time overlapped backward, and the latest start after backward, as sentences."""
    share, buckets = results["overlap"]["overlapped_share"], len(results["buckets"])
    late = latest_start(results["overlap"]["rows"])
    why = ("with a single bucket that becomes ready when backward is finished, there is nothing left to overlap with, "
           "and whatever overlapped is backward's last node itself: DDP calls the hook from "
           "inside it (the `AccumulateGrad` of `tok_emb.weight`), so gloo can start before that slice closes"
           if buckets == 1 else f"with {buckets} buckets the earlier ones can travel while backward still computes")
    start = (f"on rank {late['rank']}, profiled step {late['step']} the all-reduce began {late['start_ms']:.2f} ms "
             "after that rank's backward ended, the latest start in the table (section 3)" if late["start_ms"] > 0
             else "every all-reduce in the table began before its rank's backward ended")
    return (f"{share:.1%} of the all-reduce time overlapped backward: {why}. The `start` column is when each "
            f"all-reduce began against its rank's backward end and `after backward` what the step waited after "
            f"backward; {start}.")


def takeaway(results: dict) -> str:
    """The notebook's takeaway, in sentences with this run's numbers."""
    ar, head, sent = results["allreduce_ms"], results["headroom"], results["bytes_per_step"]["measured"]
    grad, buckets = results["bytes_per_step"]["gradient"], results["buckets"]
    lines = [f"- In this run DDP packed all {grad:,} bytes of MiniGPT's gradients into {plural(len(buckets), 'bucket')}"
             + (f", and each rank's gloo socket sent {statistics.fmean(sent['sent_per_rank']):,.0f} bytes a step: "
                f"{sent['sent_over_theory']:.4f} x the ring's 2(n-1)/n x the gradients, "
                f"{sent['overhead_bytes_per_step']:,.0f} bytes above it."
                if sent["sent_per_rank"] else "; this OS has no socket counters, so the bytes were not counted."),
             f"- Inside the step the all-reduce, from a rank's bucket ready to its all-reduce done, took a median "
             f"{ar['in_step']['median']:.2f} ms against {ar['standalone']:.2f} ms for the same bytes alone "
             f"({ar['in_step_over_standalone']:.1f}x). Waiting for the other rank's bucket was "
             f"{share_word(ar['waiting_share'])}, {ar['waiting_share']:.0%} of it (means); the transfer after both "
             f"were ready took a median {ar['transfer']['median']:.2f} ms, p95 {ar['transfer']['p95']:.2f} ms.",
             f"- With the no-op hook the step was {abs(head['comm_share']):.0%} "
             f"{'shorter' if head['comm_share'] > 0 else 'longer'} (the median of {len(head['repeats'])} paired "
             f"repeats' shares, single repeats {min(r['comm_share'] for r in head['repeats']):.0%} to "
             f"{max(r['comm_share'] for r in head['repeats']):.0%}; {headroom_verdict(results)}), and "
             f"{results['overlap']['overlapped_share']:.1%} "
             f"of the all-reduce time overlapped backward."]
    return "\n".join(lines)
