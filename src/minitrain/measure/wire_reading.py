"""What notebook 10 reads from wire.json and its two traces: its tables and generated sentences."""

import statistics
from pathlib import Path

from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.sittings import sitting_note
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.allreduce import ring_factor
from minitrain.measure.trace import allreduce_spans, base_ns, load_trace

SLOW = 1.5  # a transfer or a benchmark's p95 this many times its reference counts as slow
HEADER_BYTES = 48  # gloo's TCP transport: Op::preamble, six 64-bit fields, before every message
MiB = 2**20


def what_ran(results: dict) -> str:
    """The ranks and threads of the run, for its provenance line."""
    config = results["config"]
    return f"{config['world_size']} ranks x {plural(config['threads_per_rank'], 'thread')}"


def ddp_bucket_check(results: dict) -> dict[str, bool]:
    """DDP's own record of its buckets: does it list the comm hook's parameters in the same order?"""
    ddp = results["ddp_buckets"]
    same = ddp["params_in_order"] == [name for b in results["buckets"] for name in b["params"]]
    return {f"DDP's own record (bucket sizes {ddp['sizes_bytes']}): same parameters in the same order": same}


def bucket_summary(results: dict) -> str:
    """One line per bucket: bytes, MiB, tensors, and its first and last tensor in the order backward filled it."""
    lines = [f"{'bucket':>6}  {'bytes':>10}  {'MiB':>6}  {'tensors':>7}  {'first filled':<14}  last filled"]
    lines += [f"{b['index']:>6}  {b['bytes']:>10,}  {b['bytes'] / MiB:>6.3f}  {len(b['params']):>7}  "
              f"{b['params'][0]:<14}  {b['params'][-1]}" for b in results["buckets"]]
    return "\n".join(lines)


def last_tensor(results: dict) -> str:
    """The parameter whose gradient completes the last bucket: the last one backward produced."""
    return results["buckets"][-1]["params"][-1]


def bucket_text(results: dict) -> str:
    """Why the gradients make as many buckets as they do, and when the last one is ready."""
    grad, buckets = results["bytes_per_step"]["gradient"], results["buckets"]
    return (f"{plural(len(buckets), 'bucket')} for {grad / MiB:.2f} MiB of gradients; the last gradient to arrive, "
            f"`{last_tensor(results)}`, completes the last bucket, so that all-reduce starts only when backward is over.")


def ring_table(gradient_bytes: int, ranks: list[int]) -> str:
    """What each rank sends in a ring all-reduce of `gradient_bytes` for each number of ranks: 2(n-1)/n x."""
    lines = [f"{'ranks':>5}  {'bytes each rank sends':>21}  {'x gradients':>11}"]
    lines += [f"{n:>5}  {ring_factor(n) * gradient_bytes:>21,.0f}  {ring_factor(n):>11.3f}" for n in ranks]
    return "\n".join(lines)


def bytes_table(results: dict) -> str:
    """Bytes per step and rank: the ring's theory against the kernel's socket counters."""
    wire = results["bytes_per_step"]
    measured = wire["measured"]
    lines = [f"{'per step':<8}  {'sent':>10}  {'retransmitted':>13}  {'received':>10}",
             f"{'theory':<8}  {wire['ring_theory_per_rank']:>10,.0f}  {'':>13}  {wire['ring_theory_per_rank']:>10,.0f}"]
    if measured["sent_per_rank"] is None:
        return "\n".join(lines + [measured["source"]])
    lines += [f"{f'rank {r}':<8}  {sent:>10,.0f}  {again:>13,.0f}  {received:>10,.0f}"
              for r, (sent, again, received) in enumerate(zip(measured["sent_per_rank"],
                                                              measured["retransmitted_per_rank"],
                                                              measured["received_per_rank"]))]
    return "\n".join(lines)


def bytes_text(results: dict) -> str:
    """The sent bytes above the ring's, in gloo's message headers, and the retransmitted bytes, as sentences."""
    measured = results["bytes_per_step"]["measured"]
    if measured["sent_per_rank"] is None:
        return "This OS has no socket counters: the bytes were not counted."
    extra = measured["overhead_bytes_per_step"]
    headers = extra / HEADER_BYTES
    framing = (f"{extra:,.0f} bytes a step above the ring's ({measured['sent_over_theory']:.4f}x): "
               + (f"{headers:.0f} of gloo's {HEADER_BYTES}-byte message headers." if headers == round(headers)
                  else f"not a whole number of gloo's {HEADER_BYTES}-byte message headers."))
    again, steps = measured["retransmitted_per_rank"], results["config"]["plan"]["measured"]
    twice = [(r, b) for r, b in enumerate(again) if b]
    resent = ("No byte was sent twice." if not twice else
              and_list([f"rank {r}" for r, _ in twice]).capitalize() + " also sent "
              + and_list([f"{b * steps:,.0f}" for _, b in twice]) + f" bytes a second time over the {steps} measured "
              "steps (`bytes_retrans`, counted apart; the table gives their mean a step): TCP resends what is not acknowledged in "
              "time, and even a loopback drops packets when a queue overflows; the counters do not say which, nor "
              "in which steps.")
    return f"The ranks sent a mean {framing} {resent}"


def and_list(items: list[str]) -> str:
    """'a, b and c'."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def allreduce_table(results: dict) -> str:
    """The all-reduce's time per step and rank (median, mean, p95) in the step, split into waiting and
    transfer; alone; the benchmark's fit; each rank's means."""
    ar = results["allreduce_ms"]
    row = lambda name, s: f"{name:<30}  {s['median']:>6.2f}  {s['mean']:>6.2f}  {s['p95']:>6.2f}"  # noqa: E731
    one = lambda name, ms: f"{name:<30}  {ms:>6.2f}  {'':>6}  {'':>6}"  # noqa: E731
    lines = [f"{'ms per step and rank':<30}  {'median':>6}  {'mean':>6}  {'p95':>6}",
             row("in the step", ar["in_step"]), row("= waiting for the other rank", ar["waiting"]),
             row("+ transfer after both ready", ar["transfer"]), one("alone, the same bytes", ar["standalone"])]
    if ar["predicted"] is not None:
        lines.append(one("notebook 07's alpha-beta fit", ar["predicted"]))
    for r in ar["per_rank"]:  # each rank's own means: the waiting falls on both, or on one
        lines += [f"{name:<30}  {'':>6}  {mean:>6.2f}  {'':>6}" for name, mean in
                  ((f"rank {r['rank']}: in the step", r["in_step_mean"]), (f"rank {r['rank']}: waiting", r["waiting_mean"]))]
    return "\n".join(lines)


def waiting_text(results: dict, bench: dict | None = None) -> str:
    """The in-step all-reduce against alone, its waiting share, and the benchmark's fit against the stand-alone
    run (`bench`: the benchmark's results, for their sitting)."""
    ar = results["allreduce_ms"]
    rows, alone, predicted = ar["per_step"], ar["standalone"], ar["predicted"]
    quick = sum(r["transfer_ms"] < SLOW * alone for r in rows)
    note = sitting_note(results, bench) if bench else ""
    diff = alone / predicted - 1 if predicted else 0.0  # as notebook 07 states it: the run against the fit
    fit = ("" if predicted is None else
           f" Notebook 07's fit says {predicted:.2f} ms for these bytes; alone, here, they took {alone:.2f} ms"
           + (f", {abs(diff):.0%} {'less' if diff < 0 else 'more'}" if abs(diff) >= 0.05 else ", within 5% of it")
           + f" (notebook 07 sets both beside its own median{', recorded in one sitting' if bench and not note else ''})."
           + (f" {note}" if note else ""))
    return (f"In the step the all-reduce took {ar['in_step_over_standalone']:.1f}x its median alone. Waiting for the "
            f"other rank was {share_word(ar['waiting_share'])} ({ar['waiting_share']:.0%} of the mean); the transfer "
            f"after both were ready took {ar['transfer']['median'] / alone:.1f}x the stand-alone median, and "
            f"{quick} of {len(rows)} (step, rank) rows came within {SLOW}x of it.{fit}")


def share_word(share: float) -> str:
    """'the smaller part' or 'the larger part' of a whole, for a share of it."""
    return "the smaller part" if share < 0.5 else "the larger part"


def trace_spans(results: dict, folder: Path) -> list[dict]:
    """Both ranks' traced all-reduces (trace.allreduce_spans, with the rank), from the traces in `folder`."""
    return [row | {"rank": rank} for rank, name in enumerate(results["overlap"]["traces"])
            for row in allreduce_spans(load_trace(folder / name), base_ns(folder / name))]


def _other(spans: list[dict], row: dict) -> dict | None:
    """The other rank's all-reduce of the same step and bucket."""
    return next((s for s in spans if (s["step"], s["allreduce"]) == (row["step"], row["allreduce"])
                 and s["rank"] != row["rank"]), None)


def hook_table(spans: list[dict]) -> str:
    """Per traced all-reduce: the hook's division, the time from it to gloo's start, gloo's slice, and its start
    and end against the other rank's (ms; positive: later)."""
    lines = [f"{'rank':>4} {'step':>4} {'div_ ms':>7} {'div_ -> gloo ms':>15} {'gloo ms':>7} "
             f"{'starts vs other rank':>20} {'ends vs other rank':>18}"]
    for s in sorted(spans, key=lambda s: (s["rank"], s["step"], s["allreduce"])):
        other, ms = _other(spans, s), lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        vs = lambda key: "-" if other is None else f"{(s[key] - other[key]) / 1e3:+.2f}"  # noqa: E731
        lines.append(f"{s['rank']:>4} {s['step']:>4} {ms(s['divide_ms']):>7} {ms(s['to_gloo_ms']):>15} "
                     f"{(s['end_us'] - s['start_us']) / 1e3:>7.2f} {vs('start_us'):>20} {vs('end_us'):>18}")
    return "\n".join(lines)


def hook_text(results: dict, spans: list[dict]) -> str:
    """The hook's measured work before gloo starts (its division, then the hand-off to gloo's worker thread),
    beside the transfer's excess over the stand-alone all-reduce."""
    ar = results["allreduce_ms"]
    excess = ar["transfer"]["median"] - ar["standalone"]
    hooked = [s for s in spans if s["divide_ms"] is not None]
    if not hooked:
        return "The traces hold no hook division before an all-reduce: they do not show the hook's own work."
    span = lambda values: f"{min(values):.2f}-{max(values):.2f} ms"  # noqa: E731
    before = [s["divide_ms"] + s["to_gloo_ms"] for s in hooked]
    median = statistics.median(before)
    against = (f"That median is {median / excess:.0%} of the {excess:.2f} ms by which the transfer's median exceeds "
               "the stand-alone one" if median < excess else
               f"That median covers all of the {excess:.2f} ms by which the transfer's median exceeds the stand-alone "
               "one" if excess > 0 else "The transfer's median does not exceed the stand-alone one")
    rest = ("; the rest is not measured here: our hypothesis is gloo's threads, asleep through forward and backward, "
            "woken on CPUs both ranks share (`perf sched` would test it)." if 0 < median < excess else ".")
    return (f"Before gloo moved a byte, the traced steps spent {span(before)} (median {median:.2f}) in the hook: its "
            f"division, {span([s['divide_ms'] for s in hooked])}, which the stand-alone all-reduce does not do, then "
            f"the hand-off to gloo's worker thread, {span([s['to_gloo_ms'] for s in hooked])}. {against} (traced steps "
            f"run slower, under the profiler, and the stand-alone all-reduce makes a hand-off too, untimed){rest}")


def delayed_start_text(results: dict, spans: list[dict]) -> str:
    """The traced all-reduce that began latest after its rank's backward ended, and the other rank's all-reduce
    of the same step and bucket, aligned on the clock both traces share."""
    late = max(results["overlap"]["rows"], key=lambda r: r["start_ms"])
    several = any(r["allreduce"] > 0 for r in results["overlap"]["rows"])
    which = (f"rank {late['rank']}'s all-reduce" + (f" {late['allreduce']} (launch order)" if several else "")
             + f" in traced step {late['step']}")
    if late["start_ms"] <= 0:
        return (f"Every traced all-reduce began before its rank's backward ended (the latest, {which}, "
                f"{-late['start_ms']:.2f} ms before), so none waited to start.")
    text = (f"The latest start after backward: {which}, {late['start_ms']:.2f} ms after that rank's backward ended; "
            f"it ran {late['allreduce_ms']:.2f} ms.")
    key = (late["rank"], late["step"], late["allreduce"])
    mine = next((s for s in spans if (s["rank"], s["step"], s["allreduce"]) == key), None)
    other = _other(spans, mine) if mine else None
    if other is None:
        return text
    lag = (other["start_us"] - mine["start_us"]) / 1e3
    end = (other["end_us"] - mine["end_us"]) / 1e3
    ended = f"ended {abs(end):.2f} ms {'earlier' if end < 0 else 'later'}"
    return text + (f" Rank {other['rank']}'s began {lag:.2f} ms later and {ended}: for {lag / late['allreduce_ms']:.0%} "
                   f"of its time rank {late['rank']}'s all-reduce waited for rank {other['rank']} to start."
                   if lag > 0 else f" Rank {other['rank']}'s had begun {-lag:.2f} ms earlier and {ended}: rank "
                   f"{late['rank']} was the one waited for.")


def slow_transfer_text(results: dict, bench: dict) -> str:
    """The benchmark's own slow tail at the size nearest the gradients, beside this run's, as a sentence."""
    gradient = results["bytes_per_step"]["gradient"]
    row = min(bench["results"], key=lambda r: abs(r["bytes"] - gradient))
    tail = row["p95_ms"] / row["median_ms"]
    transfer = results["allreduce_ms"]["transfer"]
    return " ".join(filter(None, [
        ("The benchmark alone has such slow calls too" if tail >= SLOW else
         f"The benchmark alone has no such tail (its p95 within {SLOW}x of its median)")
        + f": notebook 07's p95 at {row['bytes'] / MiB:.3g} MiB is {tail:.1f}x its median; the transfer's here "
        f"is {transfer['p95'] / transfer['median']:.1f}x.", sitting_note(results, bench)]))


def headroom_table(results: dict) -> str:
    """Rank 0's median step with the all-reduce and with the no-op hook, per repeat and overall."""
    head = results["headroom"]
    lines = [f"{'repeat':>6}  {'all-reduce ms':>13}  {'no-op ms':>8}  {'communication':>13}"]
    lines += [f"{r['repeat']:>6}  {r['step_ms_allreduce']:>13.1f}  {r['step_ms_noop']:>8.1f}  {r['comm_share']:>13.0%}"
              for r in head["repeats"]]
    lines.append(f"{'median':>6}  {head['step_ms_allreduce']:>13.1f}  {head['step_ms_noop']:>8.1f}  "
                 f"{head['comm_share']:>13.0%}")
    return "\n".join(lines)


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
    return (f"Communication took {head['comm_share']:.0%} of the step, the median of {len(shares)} paired shares "
            f"(single repeats {min(shares):.0%} to {max(shares):.0%}); {headroom_verdict(results)}.")


def overlap_rows_table(results: dict) -> str:
    """Per profiled step and rank: all-reduce time, the part that overlapped backward, its start against
    this rank's backward end, the time the step waited after backward, backward itself (ms); the overlapped share."""
    lines = [f"{'rank':>4} {'step':>4} {'all-reduce ms':>13} {'overlapped ms':>13} {'start ms':>8} "
             f"{'after backward ms':>17} {'backward ms':>11}"]
    lines += [f"{r['rank']:>4} {r['step']:>4} {r['allreduce_ms']:13.2f} {r['overlapped_ms']:13.2f} {r['start_ms']:+8.2f} "
              f"{r['after_backward_ms']:17.2f} {r['backward_ms']:11.2f}" for r in results["overlap"]["rows"]]
    lines.append(f"{'all':>4} {'':>4} {'':>13} {results['overlap']['overlapped_share']:>13.1%}")
    return "\n".join(lines)


def overlap_text(results: dict) -> str:
    """How much of the all-reduce time overlapped backward, and why, as a sentence."""
    share, buckets = results["overlap"]["overlapped_share"], len(results["buckets"])
    why = (f"not real overlap: with one bucket, DDP calls the hook from inside backward's last node (the "
           f"`AccumulateGrad` of `{last_tensor(results)}`), so gloo can start before that slice closes"
           if buckets == 1 else f"with {buckets} buckets the earlier ones can travel while backward still computes")
    return f"{share:.1%} of the all-reduce time overlapped backward: {why}."


def takeaway(results: dict) -> str:
    """The notebook's takeaway, in sentences with this run's numbers."""
    ar, head, sent = results["allreduce_ms"], results["headroom"], results["bytes_per_step"]["measured"]
    grad, buckets = results["bytes_per_step"]["gradient"], results["buckets"]
    return "\n".join([
        f"- DDP sent MiniGPT's {grad / MiB:.2f} MiB of gradients in {plural(len(buckets), 'bucket')}"
        + (f"; each rank's socket carried {sent['sent_over_theory']:.4f}x the ring's bytes."
           if sent["sent_per_rank"] else "; this OS has no socket counters."),
        f"- In the step the all-reduce took {ar['in_step_over_standalone']:.1f}x its time alone (medians); waiting "
        f"for the other rank was {share_word(ar['waiting_share'])} ({ar['waiting_share']:.0%}, means).",
        f"- With the no-op hook the step was {abs(head['comm_share']):.0%} "
        f"{'shorter' if head['comm_share'] > 0 else 'longer'} (median of {len(head['repeats'])} paired repeats); "
        f"{results['overlap']['overlapped_share']:.1%} of the all-reduce time overlapped backward."])
