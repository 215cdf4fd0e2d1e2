"""A small DDP training run with one mistake of the kind a learner's code makes, for notebook 16:

    python -m minitrain.launch --nproc-per-node=2 -m minitrain.diagnose.faults KIND [--plain]

Each KIND's mistake sits in `train`, written as a learner writes it. The tool in the ranks comes from the
environment (inrank.diagnosed); the run's output stays as a learner sees it.
"""

import argparse
import inspect
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.inrank import Tools, diagnosed
from minitrain.model import build_minigpt

KINDS = ("barrier-on-one-rank", "skipped-collective", "mismatched-shapes", "skipped-backward", "straggler")
STEPS, FAULT_STEP, VOCAB, BATCH, BLOCK = 6, 3, 64, 4, 16
SLOW_S = 0.25  # the straggler's extra work per step


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's own tokens for a step (random, seeded by rank and step): its shard of the data."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(VOCAB, (BATCH, BLOCK + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(kind: str, rank: int, model: torch.nn.Module, tools: Tools) -> None:
    """STEPS steps of DDP training with `kind`'s mistake in them."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        tools.step(step)
        x, y = batch(rank, step)
        result = model((x, y))
        loss = result.loss
        optimizer.zero_grad()
        if kind == "skipped-backward" and rank == 1 and step == FAULT_STEP:
            tools.fault()
            continue  # "skip a bad batch", which only this rank judged bad
        if kind == "straggler" and rank == 1:
            tools.fault()
            time.sleep(SLOW_S)  # extra work on one rank: every step, the other waits for it in backward
        loss.backward()
        if not isinstance(model, DDP):  # --plain: the gradients averaged by hand, one all-reduce
            average_gradients(model)
        optimizer.step()
        if kind == "skipped-collective" and step == FAULT_STEP and rank == 0:
            tools.fault()
            dist.all_reduce(loss.detach())  # the mean loss, for the log: only rank 0 asks
            print(f"step {step}: mean loss {loss.item() / dist.get_world_size():.3f}", flush=True)
        if kind == "barrier-on-one-rank" and step == FAULT_STEP and rank == 0:
            tools.fault()
            torch.save(getattr(model, "module", model).state_dict(), os.devnull)  # a checkpoint
            dist.barrier()  # wait until the checkpoint is written: but only rank 0 is here
        if kind == "mismatched-shapes" and step == FAULT_STEP:
            tools.fault()
            per_token = F.cross_entropy(result.logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none")
            kept = per_token[per_token < per_token.median() + rank]  # each rank keeps its own count
            dist.all_reduce(kept.detach())  # summed across ranks: but the lengths differ
    print(f"rank {rank} done", flush=True)


def average_gradients(model: torch.nn.Module) -> None:
    """What DDP does, by hand: every gradient summed across ranks in one flat all-reduce, then divided."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="A DDP run with one mistake, for notebook 16.")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--plain", action="store_true", help="no DDP: the gradients averaged by hand (average_gradients), "
                   "as TORCH_DISTRIBUTED_DEBUG=DETAIL needs in torch 2.13")
    args = p.parse_args(argv)
    with diagnosed() as tools:
        torch.manual_seed(0)
        model = build_minigpt(VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
        train(args.kind, tools.rank, model if args.plain else DDP(model), tools)


def mistake_lines(kind: str) -> str:
    """`kind`'s lines of `train`, numbered as in this file: the mistake, as a learner would read it."""
    lines, first = inspect.getsourcelines(train)
    shown, indent = [], None  # the indent of kind's `if`, while inside it
    for n, line in enumerate(lines, first):
        depth = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and depth <= indent:
            indent = None
        if line.strip().startswith("if ") and f'"{kind}"' in line:
            indent = depth
        if indent is not None and line.strip():
            shown.append(f"{n:4} {line.rstrip()}")
    return "\n".join(shown)


if __name__ == "__main__":
    main()
