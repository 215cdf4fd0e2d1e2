"""Lab 01, Block C: train MiniGPT with DDP between CPU processes (gloo) and time the all-reduce.

    python -m minitrain.launch --nproc-per-node=2 experiments/35-ddp-cpu/train.py   # the lab's torchrun
    torchrun --standalone --nproc-per-node=1 experiments/35-ddp-cpu/train.py --out build/one
    python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2               # the sheet's fallback

Every rank seeds itself with 35000 + rank and trains on its own shard; DDP averages the gradients
inside loss.backward(). Rank 0 writes timings.jsonl and run.json, every rank its state-rank-{rank}.pt,
into --out (by default this folder, over the committed artifacts). The extras (controls, snapshots,
faults) are one call each and do nothing without their flags.
"""

import argparse
import time
from pathlib import Path

import torch

from minitrain import controls, fault, snapshot
from minitrain.cli import LabArgumentParser, exit_on_bad_input, nonnegative_int, output_folder, positive_float, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.data import SEED_BASE, check_shards, load_corpus, make_shard
from minitrain.ddp import cleanup, init_distributed, is_main_process, unwrap, wrap_for_ddp
from minitrain.launch import spawn_workers
from minitrain.model import MiniGPTConfig
from minitrain.run_record import write_run_files
from minitrain.timing import BY_NAME, VARIANTS, attach_instrumented_hook, timed_backward
from minitrain.train import TrainConfig, build_model_for_corpus, log_step, seed_everything

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = LabArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--warmup", type=nonnegative_int, default=50, help="steps left out of the summary")
    p.add_argument("--batch-size", type=positive_int, default=TrainConfig.batch_size, help="sequences per rank per step")
    p.add_argument("--block-size", type=positive_int, default=TrainConfig.block_size, help="tokens per sequence")
    p.add_argument("--lr", type=positive_float, default=TrainConfig.lr)
    for name in ("n_layer", "n_head", "n_embd"):
        p.add_argument(f"--{name.replace('_', '-')}", type=positive_int, default=getattr(MiniGPTConfig, name))
    p.add_argument("--out", type=output_folder, default=HERE, help="output folder (default: this folder)")
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--timing", default=",".join(BY_NAME),
                   help="comma-separated timing variants: " + "; ".join(f"{v.name} = {v.label}" for v in VARIANTS))
    p.add_argument("--launcher", choices=["torchrun", "spawn"], default="torchrun")
    p.add_argument("--nproc", type=positive_int, default=2, help="processes, with --launcher spawn")
    controls.add_arguments(p)  # --comm noop, --no-sync, --track-drift
    snapshot.add_arguments(p)  # --snapshot-every
    fault.add_arguments(p)  # --fail-at
    args = p.parse_args(argv)
    args.timing = args.timing.split(",")
    if unknown := [name for name in args.timing if name not in BY_NAME]:
        p.error(f"--timing {','.join(args.timing)}: unknown variant {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup}): "
                "the summary uses the steps after the warm-up")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd ({args.n_embd}) must be a multiple of --n-head ({args.n_head}): "
                "each head gets n_embd / n_head dimensions")
    return args


def train(args: argparse.Namespace) -> None:
    """One rank of the run: the sheet's setup, the steps, the files, cleanup."""
    # The setup, as the sheet says: join the group (init_distributed), seed with SEED_BASE + rank (35000 + rank),
    # build the model (build_model_for_corpus) and this rank's shard (make_shard) from args, wrap the model
    # (wrap_for_ddp), AdamW at args.lr. The code below needs: rank, world_size, model (wrapped), shard, optimizer.
    ### BEGIN SOLUTION: Block C: the setup (init gloo, seed 35000 + rank, model, shard, wrap, AdamW)
    rank, world_size = init_distributed("gloo")
    seed_everything(SEED_BASE + rank)  # different per rank; DDP broadcasts rank 0's weights anyway
    with exit_on_bad_input(f"rank {rank}"):  # a missing or broken corpus: one line, exit 2
        model, _ = build_model_for_corpus(args.corpus_dir, args.block_size, n_layer=args.n_layer,
                                          n_head=args.n_head, n_embd=args.n_embd)
        shard = make_shard(rank, world_size, args.corpus_dir, batch_size=args.batch_size,
                           block_size=args.block_size)
    model = wrap_for_ddp(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    ### END SOLUTION
    shards = check_shards(shard, rank, world_size, len(load_corpus(args.corpus_dir / "train.jsonl")))
    hook = attach_instrumented_hook(model, comm=args.comm)  # DDP's own all-reduce, with a stopwatch
    timers = {v.field: v.attach(hook) for v in VARIANTS if v.name in args.timing}  # Block D's variants
    tokens = args.batch_size * args.block_size * world_size  # global tokens per step
    snapshots = snapshot.Snapshots(args, world_size)  # --snapshot-every; --fail-at goes into run.json
    records, start = snapshots.resume(unwrap(model), optimizer, shard)  # [], 0 without --snapshot-every

    for step in range(start, args.steps):
        fault.kill_if_due(args.fail_at, step, rank)  # --fail-at
        # One step: next(shard), forward (model(batch).loss), timed_backward(loss, list(timers.values())) in place of
        # loss.backward(), optimizer step, zero_grad. Forward and backward go inside
        # `with controls.maybe_no_sync(model, args.no_sync):` (--no-sync, notebook 09). Then `record`, one line of
        # timings.jsonl: {"step": step, "loss": a float, "forward_ms": next(shard) and the forward, "backward_ms":
        # timed_backward, "optimizer_ms": the optimizer step and zero_grad, "step_ms": the three together, all in
        # milliseconds (time.perf_counter() x 1e3), "tokens": tokens} (tokens is set above: every rank's tokens
        # in one step).
        ### BEGIN SOLUTION: Block C: one training step and its record
        t0 = time.perf_counter()
        batch = next(shard)
        with controls.maybe_no_sync(model, args.no_sync):  # --no-sync: no all-reduce at all
            loss = model(batch).loss
            t1 = time.perf_counter()
            timed_backward(loss, list(timers.values()))  # DDP's all-reduce fires in here
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        record = {"step": step, "loss": loss.item(), "step_ms": (t3 - t0) * 1e3, "forward_ms": (t1 - t0) * 1e3,
                  "backward_ms": (t2 - t1) * 1e3, "optimizer_ms": (t3 - t2) * 1e3, "tokens": tokens}
        ### END SOLUTION
        record |= {v.field: timers[v.field].pop_ms() if v.field in timers else None for v in VARIANTS}
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
