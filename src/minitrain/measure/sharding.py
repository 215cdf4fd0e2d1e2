"""Notebooks 18 and 19: your ShardedOptimizer (minitrain.sharded_optimizer, notebook 18) or your FSDP
(minitrain.fsdp, notebook 19) beside DDP with AdamW, torch's ZeroRedundancyOptimizer and, in 19, torch's fully_shard,
in the same real gloo ranks, on the same batches: the bytes each rank holds (at rest, and at the peak of a step), the
bytes it sends in a step, the step's time, and the weights each ends with.

    python -m minitrain.measure.sharding [--steps 7] [--notebook 18|19]
"""

import json
import os
import statistics
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.profiler import ProfilerActivity, profile

from minitrain.cli import LabArgumentParser, positive_int
from minitrain.ddp import init_distributed, wrap_for_ddp
from minitrain.fsdp import after_backward, shard_model
from minitrain.gloo_setup import loopback_interface
from minitrain.lab.reporting.verdict import times_compared
from minitrain.lab.running.load import busy_sentence, measure_load
from minitrain.launch import ranks_json
from minitrain.measure.allreduce import timed_ms
from minitrain.measure.sockets import gloo_pair_endpoints, my_connections, sent_during
from minitrain.model import build_minigpt
from minitrain.sharded_optimizer import ShardedOptimizer

KINDS = {"18": ("DDP", "yours", "ZeRO"),  # DDP with AdamW; your ShardedOptimizer alone; DDP with torch's ZeRO
         "19": ("DDP", "ZeRO", "your FSDP", "fully_shard")}  # and your minitrain.fsdp; torch's FSDP2 per block
YOURS = {"18": "yours", "19": "your FSDP"}  # the kind each notebook's verdict compares with DDP
VOCAB, BATCH, LENGTH, LR = 64, 12, 32, 1e-2  # MiniGPT's default size; 12 sequences divide among 2, 3 and 4 ranks
WORLD_SIZES = (2, 3)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: fully_shard's parameters, gradients and state are DTensors."""
    return t.to_local() if hasattr(t, "to_local") else t


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """The bytes of the storages behind `tensors` (this rank's part of a DTensor), each storage once (a tied weight,
    or views of one buffer); a freed storage counts 0."""
    local = [_local(t) for t in tensors if t is not None]
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in local}
    return sum(seen.values())


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors of an optimizer's state: AdamW's two averages per parameter, and its step counts (4 bytes each)."""
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def demo() -> str:
    """Two ranks call the two collectives a sharded optimizer is made of, on small tensors: what each rank gets."""
    return "\n".join(ranks_json(_demo_rank, 2, timeout_s=120))


def _demo_rank(out: str) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    dist.init_process_group("gloo")  # not your init_distributed: the demo runs before any TODO is asked of you
    rank = dist.get_rank()
    given = torch.arange(1.0, 5.0) * 10 ** rank  # rank 0: 1 2 3 4; rank 1: 10 20 30 40
    part = torch.empty(2)
    dist.reduce_scatter_single(part, given)  # rank r receives the sum of everyone's r-th half
    everyone = torch.empty(4)
    dist.all_gather_single(everyone, torch.full((2,), float(rank)))  # rank r's 2 elements at [2r, 2r + 2)
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(
        f"rank {rank} gave {given.tolist()}: reduce_scatter_single gave it {part.tolist()}; all_gather_single of "
        f"[{rank}.0, {rank}.0] gave it {everyone.tolist()}"))
    dist.destroy_process_group()


def _batch(step: int, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the step's batch: the same whole batch for every kind and for one process."""
    tokens = torch.randint(VOCAB, (BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(step))
    mine = tokens.chunk(n)[rank]
    return mine[:, :-1], mine[:, 1:]


class _Trainer:
    """One kind: its model, its optimizer, and its step on this rank's share of a batch."""

    def __init__(self, kind: str) -> None:
        torch.manual_seed(0)
        self.kind, self.model, self.units = kind, build_minigpt(VOCAB), []
        self.net = self.model
        if kind == "yours":
            self.optimizer = ShardedOptimizer(self.model.parameters(), torch.optim.AdamW, lr=LR)
        elif kind == "your FSDP":
            self.units, self.optimizer = shard_model(self.model, torch.optim.AdamW, lr=LR)
        elif kind == "fully_shard":
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            for block in self.model.blocks:  # each block a unit, then the root: the tied weight in the root's unit
                fully_shard(block, mesh=mesh)
            fully_shard(self.model, mesh=mesh)
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR)  # after sharding: over the shards
        else:
            self.net = wrap_for_ddp(self.model)  # your Block A: DDP with PyTorch's defaults
            self.optimizer = (torch.optim.AdamW(self.model.parameters(), lr=LR) if kind == "DDP" else
                              ZeroRedundancyOptimizer(self.model.parameters(), optimizer_class=torch.optim.AdamW, lr=LR))
        self.steps = 0

    def step(self) -> None:
        x, y = _batch(self.steps, dist.get_rank(), dist.get_world_size())
        self.optimizer.zero_grad(set_to_none=True)
        self.net((x, y)).loss.backward()
        if self.kind == "yours":
            self.optimizer.average_gradients()
        if self.kind == "your FSDP":
            after_backward(self.units)
        self.optimizer.step()
        self.steps += 1

    def held(self) -> dict[str, int]:
        """Bytes this rank holds for training, by what they are: each storage once."""
        params = list(self.model.parameters()) + [unit.shard for unit in self.units]
        inner = {"yours": getattr(self.optimizer, "optimizer", None),
                 "ZeRO": getattr(self.optimizer, "optim", None)}.get(self.kind, self.optimizer)
        buckets = sum(int(size) for size in self.net._get_ddp_logging_data()["bucket_sizes"].split(", ")) if (
            self.kind in ("DDP", "ZeRO")) else 0
        return {"parameters": storage_bytes(params), "gradients": storage_bytes(p.grad for p in params),
                "optimizer state": storage_bytes(optimizer_state(inner)) if inner else 0, "DDP's buckets": buckets}

    def sizes(self) -> dict[str, int] | None:
        """What the arithmetic of the bytes sent needs: your ShardedOptimizer's part of the parameters (elements),
        or an FSDP's padded parameters, all units' and the blocks' alone; None for the other kinds."""
        if self.kind == "yours":
            inner = getattr(self.optimizer, "optimizer", None)  # your step's optimizer over this rank's parameters
            return {"part": sum(p.numel() for g in inner.param_groups for p in g["params"])} if inner else None
        if self.kind == "your FSDP":
            return {"units": sum(u.full.numel() for u in self.units),
                    "blocks": sum(u.full.numel() for u in self.units[:-1])}
        if self.kind == "fully_shard":  # its shards are padded per parameter: n times each local shard
            n = dist.get_world_size()
            return {"units": sum(_local(p).numel() * n for p in self.model.parameters()),
                    "blocks": sum(_local(p).numel() * n for p in self.model.blocks.parameters())}
        return None

    def weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on this rank (your FSDP's units gathered for it; fully_shard's DTensors whole)."""
        for unit in self.units:
            unit.gather()
        whole = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
                 for k, v in self.model.state_dict().items()}
        for unit in self.units:
            unit.free()
        return whole

    def peak(self) -> int:
        """The most bytes live during one step: what this rank holds before it (the last step's gradients, which
        zero_grad frees, included), plus the highest running total of every allocation and free the profiler recorded
        during the step, in time order, on the threads it follows (its memory records, each counted once); the
        most of three profiled steps (threads free in varying order), after one more whose record also frees blocks
        allocated before profiling began."""
        peaks = []
        for profiled in range(4):
            before = sum(self.held().values())
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                self.step()
            records = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
            live = most = 0
            for record in sorted(records, key=lambda e: e.start_ns()):
                live += record.nbytes()
                most = max(most, live)
            peaks += [before + most] if profiled else []
        return max(peaks)


def _one_process(steps: int, n: int) -> dict[str, torch.Tensor]:
    """AdamW in one process on each step's whole batch (the n shares, in order): what the ranks stand for."""
    torch.manual_seed(0)
    model = build_minigpt(VOCAB)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = (torch.cat(parts) for parts in zip(*(_batch(step, r, n) for r in range(n))))
        optimizer.zero_grad(set_to_none=True)
        model((x, y)).loss.backward()
        optimizer.step()
    return model.state_dict()


def _largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _rank(out: str, repeats: int, notebook: str) -> None:
    log = os.open(Path(out) / f"rank-{os.environ['RANK']}.log", os.O_WRONLY | os.O_CREAT)
    os.dup2(log, 1)  # the profiler's own lines (and torch's warnings) to a file, not into the notebook
    os.dup2(log, 2)
    rank, n = init_distributed("gloo")
    torch.set_num_threads(1)  # n processes share the CPUs: one thread each, as torchrun's default
    trainers = [_Trainer(kind) for kind in KINDS[notebook]]
    for trainer in trainers:
        trainer.step()  # the optimizers' state exists after a first step
    result: dict = {"held": {t.kind: t.held() for t in trainers},
                    "peak": {t.kind: t.peak() for t in trainers}}
    endpoints = gloo_pair_endpoints(my_connections())
    result["sent"] = {t.kind: sent_during(endpoints, t.step) for t in trainers}
    result["ms"] = {t.kind: [] for t in trainers}
    for _ in range(repeats):  # alternating, so that a busy moment falls on each kind
        for trainer in trainers:
            result["ms"][trainer.kind].append(timed_ms(trainer.step))
    weights = {t.kind: t.weights() for t in trainers}
    result["steps"] = trainers[0].steps
    result["largest difference to DDP"] = {t.kind: _largest_difference(weights[t.kind], weights["DDP"]) for t in trainers}
    if rank == 0:
        result["largest difference to DDP"]["one process"] = _largest_difference(
            _one_process(trainers[0].steps, n), weights["DDP"])
    result["sizes"] = {t.kind: t.sizes() for t in trainers}
    (Path(out) / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.monitored_barrier()
    dist.destroy_process_group()


def measure(repeats: int = 7, world_sizes: tuple[int, ...] = WORLD_SIZES, notebook: str = "18") -> dict:
    """Each world size's ranks' results, {n: [rank 0's, rank 1's, ...]}, for notebook 18's kinds or 19's, with the
    model's parameter count."""
    torch.manual_seed(0)
    parameters = sum(p.numel() for p in build_minigpt(VOCAB).parameters())
    results: dict = {"parameters": parameters, "repeats": repeats, "runs": {}, "load": measure_load(),
                     "cpus": os.cpu_count(), "notebook": notebook}
    for n in world_sizes:
        results["runs"][n] = ranks_json(_rank, n, repeats, notebook)
    return results


def memory_table(results: dict) -> str:
    """Bytes held per rank, by kind and world size: each part at rest (the most of any rank), and the step's peak."""
    parts = ("parameters", "gradients", "optimizer state", "DDP's buckets")
    lines = ["| ranks | kind | " + " | ".join(parts) + " | at rest, in all | peak of a step |",
             "|---:|---|" + "---:|" * (len(parts) + 2)]
    for n, ranks in results["runs"].items():
        for kind in KINDS[results["notebook"]]:
            most = {part: max(r["held"][kind][part] for r in ranks) for part in parts}
            lines.append(f"| {n} | {kind} | " + " | ".join(f"{most[p]:,}" for p in parts)
                         + f" | {max(sum(r['held'][kind].values()) for r in ranks):,}"
                         + f" | {max(r['peak'][kind] for r in ranks):,} |")
    return "\n".join(lines)


def wire_table(results: dict) -> str:
    """Bytes a rank sent in one step (fewest-most of the ranks) beside the arithmetic, the step's median time,
    and the largest difference of the final weights to DDP's."""
    four_p = 4 * results["parameters"]
    lines = ["| ranks | kind | bytes sent in a step (fewest-most) | arithmetic | ms a step (median) | largest "
             "difference to DDP's weights |", "|---:|---|---:|---|---:|---:|"]
    for n, ranks in results["runs"].items():
        n = int(n)
        arithmetic = {"DDP": f"2(n-1)/n x 4P = {2 * (n - 1) / n * four_p:,.0f}",
                      "ZeRO": f"3(n-1)/n x 4P = {3 * (n - 1) / n * four_p:,.0f}, on average over the ranks"}
        if all(r["sizes"].get("yours") for r in ranks):  # gloo's reduce-scatter: an all-reduce of n segments
            part = max(r["sizes"]["yours"]["part"] for r in ranks)  # the segments are padded to the largest part
            arithmetic["yours"] = f"3(n-1) x 4 x the largest part = {3 * (n - 1) * 4 * part:,}"
        for kind in ("your FSDP", "fully_shard"):  # forward's gathers, backward's (the blocks'), the gradients'
            if fsdp := ranks[0]["sizes"].get(kind):
                arithmetic[kind] = f"(n-1)/n x 4 x (3U + B) = {(n - 1) / n * 4 * (3 * fsdp['units'] + fsdp['blocks']):,.0f}"
        for kind in KINDS[results["notebook"]]:
            counts = [r["sent"][kind] for r in ranks]
            sent = "n/a" if None in counts else f"{min(counts):,}-{max(counts):,}"
            ms = statistics.median(t for r in ranks for t in r["ms"][kind])
            diff = max(r["largest difference to DDP"][kind] for r in ranks)
            lines.append(f"| {n} | {kind} | {sent} | {arithmetic.get(kind, 'n/a')} | {ms:.1f} | {diff:.1e} |")
    return "\n".join(lines)


def verdicts(results: dict) -> str:
    """Per world size, your step's time against DDP's by the lab's verdict over repeats; first, whether the machine
    was busy; last, how far one process on the whole batch ends from DDP (the scale of a right answer's difference)."""
    lines = [busy_sentence(results["load"])] if results["load"].busy else []
    for n, ranks in results["runs"].items():
        n = int(n)
        yours, ddp = ([statistics.median(r["ms"][k][i] for r in ranks) for i in range(results["repeats"])]
                      for k in (YOURS[results["notebook"]], "DDP"))
        cores = f" ({n} processes on {results['cpus']} CPUs)" if n > results["cpus"] else ""
        who = {"18": "your step is", "19": "your FSDP's step is"}[results["notebook"]]
        lines.append(f"{n} ranks{cores}: " + times_compared(who, "DDP's", yours, ddp))
        lines.append(f"{n} ranks: one process on the whole batch ends {ranks[0]['largest difference to DDP']['one process']:.1e} "
                     f"from DDP's weights after the same {ranks[0]['steps']} AdamW steps: a right answer's difference "
                     "is of this order")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = LabArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=7, help="timed steps of each kind, alternating")
    p.add_argument("--notebook", choices=sorted(KINDS), default="18", help="notebook 18's kinds, or 19's")
    args = p.parse_args(argv)
    results = measure(args.steps, notebook=args.notebook)
    print(memory_table(results))
    print(wire_table(results))
    print(verdicts(results))


if __name__ == "__main__":
    main()
