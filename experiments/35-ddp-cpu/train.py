"""Lab 01, Block C: train MiniGPT with DDP between CPU processes (gloo) and time the all-reduce.

    python -m minitrain.launch --nproc-per-node=2 experiments/35-ddp-cpu/train.py   # the lab's torchrun
    torchrun --standalone --nproc-per-node=1 experiments/35-ddp-cpu/train.py --out build/one
    python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2               # the sheet's fallback

The learner writes Block C's two functions, `setup` and `train_step`; the lab's measurements (minitrain.rank)
train through them too. Every rank seeds itself with 35000 + rank and trains on its own shard; DDP averages
the gradients inside loss.backward(). Rank 0 writes timings.jsonl and run.json, every rank its state-rank-{rank}.pt,
into --out (by default this folder, over the committed artifacts). The extras (controls, snapshots,
faults) are one call each and do nothing without their flags.
"""

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn as nn

from minitrain import controls, fault, snapshot
from minitrain.cli import exit_on_bad_input
from minitrain.data import Shard, check_shards, load_corpus, make_shard
from minitrain.ddp import cleanup, init_distributed, is_main_process, unwrap, wrap_for_ddp
from minitrain.launch import spawn_workers
from minitrain.run_record import write_run_files
from minitrain.script import parse_args, run_setup, run_step  # parse_args: the script's options
from minitrain.comm_hook import attach_instrumented_hook
from minitrain.timing import VARIANTS, StepTimer, timed_backward
from minitrain.train import build_model_for_corpus, log_step, seed_everything

def setup(args: argparse.Namespace, wrap: Callable[[nn.Module], nn.Module] = wrap_for_ddp
          ) -> tuple[int, int, nn.Module, Shard, torch.optim.Optimizer]:
    """Block C's setup on one rank: (rank, world_size, the wrapped model, this rank's shard, the optimizer).

    In this order: join the group with init_distributed("gloo") (it gives the rank); seed = args.seed + rank
    (35000 + rank by default: the sheet's rule) to seed_everything; build the model; wrap it; AdamW over the wrapped
    model's parameters at args.lr. The order that matters is seeding before building: the initial weights come from
    torch's RNG, and built before it is seeded they are not the seed's (rank 0's are the ones DDP broadcasts and the
    grader rebuilds). The model: build_model_for_corpus(corpus_dir, block_size, **config), which returns (model,
    tokenizer), the model's sizes given as the keywords n_layer, n_head and n_embd, each from args. The shard: make_shard
    with args.corpus_dir, batch_size, block_size and seed=seed, at any point once the seed is known (it shuffles
    with an RNG of its own). Wrap with `wrap` (wrap_for_ddp unless the lab passes another: --bucket-cap-mb, the
    deeper measurements, notebook 15's wrappers) and return the model it returned (the lab checks that setup called
    it). The grader reads each rank's seed from the run (run.json's ranks) and holds both ranks' weights to DDP's
    arithmetic bit for bit."""
    ### BEGIN SOLUTION: Block C: setup
    rank, world_size = init_distributed("gloo")
    seed = args.seed + rank  # different per rank; DDP broadcasts rank 0's weights anyway
    seed_everything(seed)
    model, _ = build_model_for_corpus(args.corpus_dir, args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                                      n_embd=args.n_embd)
    shard = make_shard(rank, world_size, args.corpus_dir, batch_size=args.batch_size, block_size=args.block_size,
                       seed=seed)
    model = wrap(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    ### END SOLUTION
    return rank, world_size, model, shard, optimizer


def train_step(model: nn.Module, shard: Shard, optimizer: torch.optim.Optimizer, timers: list[StepTimer],
               no_sync: bool = False) -> dict[str, float]:
    """Block C's step: one training step through the wrapped model; its loss and times.

    batch = next(shard); forward (model(batch).loss); timed_backward(loss, timers) in place of loss.backward()
    (the timers bracket it; DDP's all-reduce fires in it); optimizer.step(); optimizer.zero_grad(). Forward and
    backward go inside `with controls.maybe_no_sync(model, no_sync):` (next(shard) inside or before it: either) (--no-sync, notebook 09: the grader runs it
    and expects no all-reduce). Return a dict of exactly these five keys, each a finite float (not a tensor):
    {"loss": the loss as loss.item(), "forward_ms": next(shard) and the forward, "backward_ms": timed_backward,
    "optimizer_ms": step and zero_grad, "step_ms": all three, one clock from before next(shard) to after
    zero_grad}, times in milliseconds (time.perf_counter() x 1e3); the loop adds step and tokens."""
    ### BEGIN SOLUTION: Block C: train_step
    t0 = time.perf_counter()
    batch = next(shard)
    with controls.maybe_no_sync(model, no_sync):  # --no-sync: no all-reduce at all
        loss = model(batch).loss
        t1 = time.perf_counter()
        timed_backward(loss, timers)  # DDP's all-reduce fires in here
    t2 = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    return {"loss": loss.item(), "step_ms": (t3 - t0) * 1e3, "forward_ms": (t1 - t0) * 1e3,
            "backward_ms": (t2 - t1) * 1e3, "optimizer_ms": (t3 - t2) * 1e3}
    ### END SOLUTION


def train(args: argparse.Namespace) -> None:
    """One rank of the run: Block C's setup, the steps, the files, cleanup."""
    with exit_on_bad_input("train.py"):  # a missing or broken corpus: one line, exit 2, before any rank joins
        corpus_total = len(load_corpus(args.corpus_dir / "train.jsonl"))
    wrap = partial(wrap_for_ddp, bucket_cap_mb=args.bucket_cap_mb)
    rank, world_size, model, shard, optimizer = run_setup(setup, args, wrap)  # its contract checked, named if broken
    shards = check_shards(shard, rank, world_size, corpus_total)
    hook = attach_instrumented_hook(model, comm=args.comm)  # DDP's own all-reduce, with a stopwatch
    timers = {v.field: v.attach(hook) for v in VARIANTS if v.name in args.timing}  # Block D's variants
    tokens = args.batch_size * args.block_size * world_size  # global tokens per step: every rank's batch
    snapshots = snapshot.Snapshots(args, world_size)  # --snapshot-every; --fail-at goes into run.json
    records, start = snapshots.resume(unwrap(model), optimizer, shard)  # [], 0 without --snapshot-every

    for step in range(start, args.steps):
        fault.kill_if_due(args.fail_at, step, rank)  # --fail-at
        record = {"step": step} | run_step(train_step, model, shard, optimizer, list(timers.values()), args.no_sync)
        record |= {"tokens": tokens} | {v.field: timers[v.field].pop_ms() if v.field in timers else None
                                        for v in VARIANTS}
        records.append(record | controls.drift(unwrap(model), args.track_drift))  # --track-drift
        if is_main_process():
            log_step(step, record["loss"], record["step_ms"] / 1e3,
                     **{k: record[k] for k in timers if record[k] is not None})
        snapshots.after_step(step + 1, unwrap(model), optimizer, shard, records)  # --snapshot-every

    write_run_files(args, unwrap(model), records, hook, shards, snapshots.record)
    cleanup()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.launcher == "spawn":
        spawn_workers(train, args.nproc, args)
    else:
        train(args)


if __name__ == "__main__":
    main()
