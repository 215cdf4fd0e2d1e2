"""Notebook 17: your ring all-reduce (minitrain.ring) beside gloo's `dist.all_reduce`, on real groups of 2, 3 and 4
processes: the sums compared, the bytes each rank sent (the kernel's counters of its gloo sockets), the time (medians
over alternating calls); then the ring as DDP's communication hook, on 2 ranks, beside DDP's own all-reduce.

    python -m minitrain.measure.ring_wire [--mib 1] [--calls 7]
"""

import json
import os
import statistics
import tempfile
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.cli import LabArgumentParser, positive_float, positive_int
from minitrain.ddp import init_distributed
from minitrain.gloo_setup import loopback_interface
from minitrain.hang_report import named_hang, watched_group_timeout
from minitrain.lab.reporting.verdict import times_compared
from minitrain.lab.running.load import busy_sentence, measure_load
from minitrain.launch import fast_start_method, ranks_json, spawn_workers
from minitrain.measure.allreduce import ring_factor, timed_ms
from minitrain.measure.sockets import gloo_pair_endpoints, my_connections, sent_during
from minitrain.model import build_minigpt
from minitrain.ring import ring_all_reduce

WORLD_SIZES = (2, 3, 4)
HOOK_STEPS = 3


def _swap_rank(out: str, blocking: bool, timeout_s: float) -> None:
    """Rank r sends four copies of r to the other rank and receives the other's: blocking calls, or posted together."""
    log = os.open(Path(out) / f"rank-{os.environ['RANK']}.log", os.O_WRONLY | os.O_CREAT)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=watched_group_timeout(rank, timedelta(seconds=timeout_s)))
    mine, theirs, other = torch.full((4,), float(rank)), torch.empty(4), 1 - rank
    if blocking:  # each rank's send waits until the other has received: neither gets to its recv
        dist.send(mine, other)
        dist.recv(theirs, other)
    else:
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, other), dist.P2POp(dist.irecv, theirs, other)]):
            work.wait()
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(theirs.tolist()))
    dist.destroy_process_group()


def swap(blocking: bool, timeout_s: float = 2.0) -> str:
    """Two ranks swap a tensor; what each received, or, when they wait for each other, the hang report's line."""
    with tempfile.TemporaryDirectory(prefix="minitrain-swap-") as out:
        try:
            spawn_workers(_swap_rank, 2, out, blocking, timeout_s, start_method=fast_start_method(),
                          timeout_s=timeout_s + 60)
        except Exception:
            said = "\n".join(p.read_text() for p in sorted(Path(out).glob("rank-*.log")))
            return named_hang(said) or "the run failed: " + said.strip().splitlines()[-1]
        return "; ".join(f"rank {r} received {json.loads((Path(out) / f'rank-{r}.json').read_text())}" for r in (0, 1))


def ring_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook with the ring: the bucket divided by the world size, then summed (as DDP's own)."""
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size())
    ring_all_reduce(buffer)
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def _trained(rank: int, hook: bool) -> dict[str, torch.Tensor]:
    """A small MiniGPT after HOOK_STEPS SGD steps of DDP on this rank's own random batches."""
    torch.manual_seed(0)
    model = DDP(build_minigpt(64, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
    if hook:
        model.register_comm_hook(None, ring_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(HOOK_STEPS):
        tokens = torch.randint(64, (4, 17), generator=torch.Generator().manual_seed(100 * rank + step))
        optimizer.zero_grad()
        model((tokens[:, :-1], tokens[:, 1:])).loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.module.state_dict().items()}


def _rank(out: str, numel: int, calls: int) -> None:
    rank, n = init_distributed("gloo")
    tensor = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    ring, gloo = tensor.clone(), tensor.clone()
    ring_all_reduce(ring)
    dist.all_reduce(gloo)
    endpoints = gloo_pair_endpoints(my_connections())
    result = {"equal": torch.equal(ring, gloo), "max_abs_diff": float((ring - gloo).abs().max()),
              "sent": {"ring": sent_during(endpoints, lambda: ring_all_reduce(tensor.clone())),
                       "gloo": sent_during(endpoints, lambda: dist.all_reduce(tensor.clone()))},
              "ms": {"ring": [], "gloo": []}}
    for _ in range(calls):  # alternating, so that a busy moment falls on both
        result["ms"]["ring"].append(timed_ms(lambda: ring_all_reduce(tensor.clone())))
        result["ms"]["gloo"].append(timed_ms(lambda: dist.all_reduce(tensor.clone())))
    if n == 2:
        plain, hooked = _trained(rank, False), _trained(rank, True)
        result["hook_weights_equal"] = all(torch.equal(plain[k], hooked[k]) for k in plain)
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.monitored_barrier()
    dist.destroy_process_group()


def measure(mib: float = 1.0, calls: int = 7, world_sizes: tuple[int, ...] = WORLD_SIZES) -> dict:
    """Each world size's ranks' results: {n: [rank 0's, rank 1's, ...]}, with the tensor's bytes."""
    numel = int(mib * 2**20) // 4
    results: dict = {"bytes": numel * 4, "repeats": calls, "runs": {}, "load": measure_load(), "cpus": os.cpu_count()}
    for n in world_sizes:
        results["runs"][n] = ranks_json(_rank, n, numel, calls)
    return results


def table(results: dict) -> str:
    """A markdown table per world size: equal sums; the fewest and the most bytes a rank sent, each way, beside
    2(n-1)/n of the tensor; the medians of the times."""
    size = results["bytes"]

    def sent(ranks: list[dict], key: str) -> str:
        counts = [r["sent"][key] for r in ranks]
        return "n/a" if None in counts else f"{min(counts):,}-{max(counts):,}"

    lines = ["| ranks | ring = gloo's sum (bitwise, or within the largest absolute difference) | bytes sent by a rank, ring (fewest-most) | "
             "gloo (fewest-most) | 2(n-1)/n x tensor | ms, ring (median) | ms, gloo (median) |", "|---:|---|---:|---:|---:|---:|---:|"]
    for n, ranks in results["runs"].items():
        n = int(n)
        equal = "bitwise" if all(r["equal"] for r in ranks) else f"within {max(r['max_abs_diff'] for r in ranks):.1e}"
        ms = [statistics.median(t for r in ranks for t in r["ms"][k]) for k in ("ring", "gloo")]
        lines.append(f"| {n} | {equal} | {sent(ranks, 'ring')} | {sent(ranks, 'gloo')} | {ring_factor(n) * size:,.0f} "
                     f"| {ms[0]:.2f} | {ms[1]:.2f} |")
    return "\n".join(lines)


def verdicts(results: dict) -> str:
    """One line per world size: the ring's times against gloo's by the lab's verdict over repeats (faster or slower
    only when every repeat of one side is below every repeat of the other); first, whether the machine was busy."""
    lines = [busy_sentence(results["load"])] if results["load"].busy else []
    for n, ranks in results["runs"].items():
        ring, gloo = ([statistics.median(r["ms"][k][i] for r in ranks) for i in range(results["repeats"])]
                      for k in ("ring", "gloo"))
        cores = f" ({n} processes on {results['cpus']} CPUs)" if n > results["cpus"] else ""
        lines.append(f"{n} ranks{cores}: " + times_compared("the ring is", "gloo's all-reduce", ring, gloo))
    return "\n".join(lines)


def hook_line(results: dict) -> str:
    """Whether the 2-rank training with the ring as DDP's communication hook ended with DDP's own weights."""
    equal = all(rank["hook_weights_equal"] for rank in results["runs"][2])
    return f"2 ranks, the ring as DDP's communication hook: weights equal to DDP's own, bit for bit: {equal}"


def main(argv: list[str] | None = None) -> None:
    p = LabArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=positive_float, default=1.0, help="the tensor's size, MiB of float32")
    p.add_argument("--calls", type=positive_int, default=7, help="timed calls of each all-reduce, alternating")
    args = p.parse_args(argv)
    results = measure(args.mib, args.calls)
    print(table(results))
    print(verdicts(results))
    print(hook_line(results))


if __name__ == "__main__":
    main()
