"""What notebook 11 reads from buckets.json: its tables, a live run's checks and the generated sentences."""

import statistics

from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.measure.buckets_ranks import TRACE_CAP, MiB, label
from minitrain.measure.trace import overlapped_share


def by_cap(results: dict) -> dict[str, dict]:
    return {c["cap"]: c for c in results["caps"]}


def fastest(results: dict) -> dict:
    """The cap with the shortest median step."""
    return min(results["caps"], key=lambda c: c["step_ms"])


def most_buckets(results: dict) -> dict:
    """The cap with the most buckets (the smallest such cap, the last in the plan's order)."""
    return max(reversed(results["caps"]), key=lambda c: c["count"])


def ms_range(c: dict) -> str:
    """A cap's repeat range: 'min-max ms' of its block medians."""
    return f"{c['step_ms_range'][0]:.1f}-{c['step_ms_range'][1]:.1f} ms"


def and_list(items: list[str]) -> str:  # 'a, b and c'
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def what_ran(results: dict) -> str:
    """The ranks, threads and plan of the run, for its provenance line."""
    config, plan = results["config"], results["config"]["plan"]
    return (f"{config['world_size']} ranks x {plural(config['threads_per_rank'], 'thread')}; {len(plan['caps'])} caps x "
            f"{plan['repeats']} repeats of {plan['warmup']} + {plan['measured']} steps, {plan['profiled']} "
            f"profiled steps per cap")


def rule_table(results: dict) -> str:
    """Per cap: DDP's caps in bytes, the buckets it made, and whether the closing rule predicts them."""
    lines = [f"{'bucket_cap_mb':>13} {'first cap B':>11} {'cap B':>10} {'buckets':>7}  bucket bytes, in launch order"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>13} {c['first_cap_bytes']:>11,} {c['cap_bytes']:>10,} {c['count']:>7}  "
                     + " ".join(f"{b:,}" for b in c["bytes"]))
    caps = results["caps"]
    lines.append(f"caps as stated: {all(c['caps_as_stated'] for c in caps)}; rule predicts the buckets: "
                 f"{all(c['rule_agrees'] for c in caps)}; DDP's record agrees: {all(c['ddp_agrees'] for c in caps)}; "
                 f"same buckets every block: {all(c['same_buckets_every_block'] for c in caps)}")
    return "\n".join(lines)


def checks(results: dict) -> dict[str, bool]:
    """The facts a run must show on any machine (a live run asserts each holds: show_checks)."""
    caps = results["caps"]
    return {"DDP set the caps as ddp_caps states them": all(c["caps_as_stated"] for c in caps),
            "the closing rule predicts every cap's buckets": all(c["rule_agrees"] for c in caps),
            "DDP's own record agrees with the comm hook": all(c["ddp_agrees"] for c in caps),
            "the default caps make 1 bucket of MiniGPT's gradients": by_cap(results)["default"]["count"] == 1,
            "both ranks bitwise equal after every block, every cap": all(c["ranks_equal"] for c in caps)}


def bucket_table(results: dict, cap: str = label(TRACE_CAP)) -> str:
    """One cap's buckets in launch order: bytes, and their tensors in the order backward filled them."""
    lines = [f"bucket_cap_mb={cap}", f"{'bucket':>6}  {'bytes':>9}  {'tensors':>7}  tensors, first to last to arrive"]
    lines += [f"{b['index']:>6}  {b['bytes']:>9,}  {len(b['params']):>7}  " + ", ".join(b["params"])
              for b in by_cap(results)[cap]["buckets"]]
    return "\n".join(lines)


def last_bucket_text(results: dict) -> str:
    """Which tensor completes the last bucket, over every cap swept."""
    last = {c["buckets"][-1]["params"][-1] for c in results["caps"]}
    if len(last) == 1:
        return (f"Every cap's last bucket is completed by `{last.pop()}`: its all-reduce starts after backward and "
                "cannot overlap it; only the buckets before it can.")
    return ("The last bucket's last tensor differs between caps (" + ", ".join(f"`{n}`" for n in sorted(last))
            + "): only the buckets before each cap's last can overlap backward.")


def timing_table(results: dict) -> str:
    """Per cap: median step and its range over repeats, tokens/s, the all-reduces summed and not hidden (ms)."""
    lines = [f"{'cap':>8} {'buckets':>7} {'step ms':>8} {'repeats min-max':>16} {'tokens/s':>9} "
             f"{'all-reduce ms':>13} {'not hidden ms':>13}"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>8} {c['count']:>7} {c['step_ms']:8.1f} "
                     f"{c['step_ms_range'][0]:7.1f}-{c['step_ms_range'][1]:<8.1f} {c['tokens_per_s']:9,.0f} "
                     f"{c['allreduce_ms']:13.2f} {c['after_last_ready_ms']:13.2f}")
    return "\n".join(lines)


def overlap_summary(results: dict) -> str:
    """Per cap, from the profiled steps: the overlapped share, the wait after backward, backward's
    autograd nodes (medians), and how many gloo threads ran all-reduces."""
    lines = [f"{'cap':>8} {'buckets':>7} {'overlapped':>10} {'after backward ms':>17} {'backward ms':>11} "
             f"{'gloo threads':>12}"]
    for c in results["caps"]:
        o = c["overlap"]
        lines.append(f"{c['cap']:>8} {c['count']:>7} {o['overlapped_share']:10.0%} {o['after_backward_ms']:17.2f} "
                     f"{o['backward_ms']:11.2f} {o['threads']:>12}")
    return "\n".join(lines)


def per_bucket_table(results: dict, cap: str = label(TRACE_CAP)) -> str:
    """One cap's all-reduces in launch order, medians over the profiled steps and both ranks: length,
    overlapped part, and start against backward's end (negative: while backward still ran)."""
    rows = by_cap(results)[cap]["overlap"]["rows"]
    pairs = len({(r["step"], r["rank"]) for r in rows})
    steps, ranks = len({r["step"] for r in rows}), len({r["rank"] for r in rows})
    lines = [f"bucket_cap_mb={cap}, medians over {pairs} (step, rank) pairs: {steps} profiled steps x {ranks} ranks:",
             f"{'all-reduce':>10} {'ms':>6} {'overlapped ms':>13} {'starts vs backward end, ms':>26}"]
    for k in sorted({r["allreduce"] for r in rows}):
        mine = [r for r in rows if r["allreduce"] == k]
        lines.append(f"{k:>10} {statistics.median([r['allreduce_ms'] for r in mine]):6.2f} "
                     f"{statistics.median([r['overlapped_ms'] for r in mine]):13.2f} "
                     f"{statistics.median([r['start_ms'] for r in mine]):+26.2f}")
    return "\n".join(lines)


def equality_table(results: dict) -> str:
    """Per cap: were both ranks bitwise equal after every block, and equal to the first block's weights?"""
    lines = [f"{'cap':>8} {'ranks bitwise equal':>19} {'max |diff|':>10} {'= first block':>13} {'max |diff|':>10}"]
    for c in results["caps"]:
        lines.append(f"{c['cap']:>8} {str(c['ranks_equal']):>19} {c['ranks_max_diff']:10.2e} "
                     f"{str(c['same_as_first_block']):>13} {c['first_block_max_diff']:10.2e}")
    return "\n".join(lines)


def fit_price(most: dict, default: dict) -> str:
    """The benchmark fit's price for the extra all-reduces: an estimate, and why it is one."""
    price, extra = most["predicted_ms"] - default["predicted_ms"], most["count"] - default["count"]
    return (f"Notebook 07's fit prices the {plural(extra, 'extra all-reduce')} at about {price:.1f} ms, an estimate: "
            "a line through one run's medians, while a sum of calls adds their means.")


def _against_alike(ms: float, alike: list[dict], what: str) -> str:
    """A profiled wait after backward set against its spread over the caps that make the same buckets (their noise)."""
    waits = [c["overlap"]["after_backward_ms"] for c in alike]
    if len(waits) < 2:
        return "."
    side = "above" if ms > max(waits) else "below" if ms < min(waits) else "within"
    return (f"; the caps that make the same {what} waited {and_list([f'{w:.1f}' for w in waits])} ms, and "
            f"{ms:.1f} lies {side} that spread.")


def takeaway(results: dict) -> str:
    """What this run shows, in sentences with its numbers; each verdict follows the data."""
    caps, config = results["caps"], results["config"]
    default, best, most = by_cap(results)["default"], fastest(results), most_buckets(results)
    d_o, m_o = default["overlap"], most["overlap"]
    params = lambda c: [b["params"] for b in c["buckets"]]  # noqa: E731
    alike = [c for c in caps if params(c) == params(default)]  # the same buckets: their differences are noise
    alike_what = "single bucket" if default["count"] == 1 else f"{default['count']} buckets"
    profiled = "medians, profiled steps"
    lines = [f"- Buckets: the caps swept made {min(c['count'] for c in caps)} to {most['count']} buckets"
             + (", each as the closing rule predicts" if all(c["rule_agrees"] for c in caps) else
                " (the closing rule fails where rule_table says False)")
             + f"; the default puts all {results['gradient_bytes'] / MiB:.2f} MiB in {default['count']}."]

    more = [c for c in caps if c["count"] > default["count"]]
    step_shares = lambda c: [overlapped_share([r for r in c["overlap"]["rows"] if (r["rank"], r["step"]) == k])  # noqa: E731
                             for k in dict.fromkeys((r["rank"], r["step"]) for r in c["overlap"]["rows"])]  # per step, rank
    misses = [c for c in more if verdict_over_repeats(step_shares(c), step_shares(default)) != "faster"]
    rule = "in every profiled (step, rank) than the default in any"
    lows = and_list([f"{min(step_shares(c)):.1%}" for c in misses])
    named = and_list([f"cap {c['cap']} ({plural(c['count'], 'bucket')})" for c in misses])
    compared = ("" if not more else f" Every cap with more buckets overlapped more {rule}." if not misses else
                f" No cap with more buckets overlapped more {rule}." if len(misses) == len(more) else
                f" {len(more) - len(misses)} of the {len(more)} caps with more buckets overlapped more {rule}; the "
                f"{'exception' if len(misses) == 1 else 'exceptions'}, {named}, had a step at {lows}, not above the "
                f"default's highest, {max(step_shares(default)):.1%}.")
    lines.append(f"- Overlap: {d_o['overlapped_share']:.0%} of the all-reduce time ran while backward computed with "
                 "the default caps" + (" (one bucket: not real overlap)" if default["count"] == 1 else "")
                 + f", {m_o['overlapped_share']:.0%} with {most['count']} buckets.{compared} After backward the step "
                 f"waited {d_o['after_backward_ms']:.1f} ms by default, {m_o['after_backward_ms']:.1f} ms with "
                 f"{most['count']} buckets ({profiled}){_against_alike(m_o['after_backward_ms'], alike, alike_what)}")

    if best["count"] == default["count"]:
        speed = (f"no cap with more buckets was faster; the shortest median step, {best['step_ms']:.1f} ms, came with "
                 f"{plural(best['count'], 'bucket')} (cap {best['cap']}).")
    elif verdict_over_repeats(best["step_ms_range"], default["step_ms_range"], higher_is_faster=False) == "faster":
        speed = (f"{best['count']} buckets (cap {best['cap']}) gave the shortest median step, {best['step_ms']:.1f} "
                 f"ms against {default['step_ms']:.1f} ms ({default['step_ms'] / best['step_ms']:.2f}x, every repeat "
                 "faster than every default one).")
    else:
        speed = (f"the fastest cap, {best['cap']} ({best['count']} buckets, {best['step_ms']:.1f} ms, repeats "
                 f"{ms_range(best)}), overlaps the default's repeats ({ms_range(default)}): no clear gain.")
    if len(alike) > 1:
        medians = and_list([f"{c['step_ms']:.1f}" for c in alike])
        speed += (f" The caps that make the same {alike_what} ({and_list([c['cap'] for c in alike])}) have medians "
                  f"of {medians} ms: this run's noise.")
    lines.append(f"- Speed: {speed}")

    extra_step = most["step_ms"] - default["step_ms"]
    versus = verdict_over_repeats(most["step_ms_range"], default["step_ms_range"], higher_is_faster=False)
    if versus == "slower":
        price = f" {fit_price(most, default)}" if most["predicted_ms"] is not None else ""
        backward = f"{m_o['backward_ms']:.1f} ms against {d_o['backward_ms']:.1f} ms ({profiled})"
        if m_o["backward_ms"] > 1.1 * d_o["backward_ms"]:
            alike_backward = [c["overlap"]["backward_ms"] for c in alike]
            spread = (f"; {min(alike_backward):.1f}-{max(alike_backward):.1f} ms across the caps that make the "
                      f"same {alike_what}" if len(alike) > 1 else "")
            why = (f" Backward's autograd nodes took longer, {backward}{spread}: gloo's threads share the "
                   f"{results['provenance'].cores} logical CPUs with backward, and the per-bucket work runs inside "
                   "backward's nodes, here with the lab's Python comm hook on every bucket (stock DDP scales in C++; "
                   f"notebook 15 times it without a hook). With {config['plan']['profiled'] * config['world_size']} "
                   "samples per cap, a correlation, not a measured cause.")
        else:
            why = f" Backward's autograd nodes took about as long, {backward}: the extra time is outside them."
        lines.append(f"- Cost: with {most['count']} buckets the step took {most['step_ms']:.1f} ms, "
                     f"{most['step_ms'] / default['step_ms']:.2f}x the default's ({extra_step:.1f} ms more).{price}{why}")
    elif versus == "faster":
        lines.append(f"- Cost: even with {most['count']} buckets the step was shorter, {most['step_ms']:.1f} ms against "
                     f"{default['step_ms']:.1f} ms, every repeat below every default one; the trace does not say "
                     "which part gained.")
    else:
        lines.append(f"- Cost: with {most['count']} buckets the step took {most['step_ms']:.1f} ms against "
                     f"{default['step_ms']:.1f} ms by default: no clear difference, the repeats' ranges overlap.")
    equal = sum(c["ranks_equal"] for c in caps)
    same = all(c["same_as_first_block"] for c in caps)
    lines.append(f"- Equality: both ranks bitwise equal after every block for {equal} of {len(caps)} caps; "
                 + ("every block ended with the same weights, whatever the cap."
                    if same else "the caps' final weights differ from each other (equality_table)."))
    return "\n".join(lines)
