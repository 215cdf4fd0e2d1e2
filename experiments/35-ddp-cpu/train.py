"""Lab 01, Block C: train MiniGPT with DDP between CPU processes (gloo) and time the all-reduce.

    python -m minitrain.launch --nproc-per-node=2 experiments/35-ddp-cpu/train.py   # the lab's torchrun
    torchrun --standalone --nproc-per-node=1 experiments/35-ddp-cpu/train.py --out /tmp/one
    python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2     # the sheet's fallback

Every rank seeds itself with 35000 + rank (its shuffle and its initial weights differ) and trains
on its own shard. Wrapping in DDP broadcasts rank 0's parameters and buffers, so the ranks start
equal; inside `loss.backward()` DDP all-reduces the gradients bucket by bucket, from autograd
hooks, and divides by the world size, so every rank takes the same optimizer step. Rank 0 writes
timings.jsonl and run.json, every rank writes state-rank-{rank}.pt. Files are written to a staging
folder and moved into place at the end. Without --out they go to this folder, over the committed
artifacts.

With --snapshot-every K every rank also writes a snapshot every K steps into OUT/snapshots (model,
optimizer, step, its data-stream position and RNG state; see minitrain.snapshot) and a run resumes
from the newest complete one there; under `--max-restarts=1` torchrun's agent restarts both workers
after a failure and they go on from it. --fail-at STEP:RANK kills a rank at a chosen step, to see that.
"""

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.artifacts import write_json
from minitrain.cli import LabArgumentParser, nonnegative_int, output_folder, positive_float, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import SEED_BASE, CorpusError, load_corpus, make_shard
from minitrain.ddp import barrier, cleanup, init_distributed, is_main_process, unwrap, wrap_for_ddp
from minitrain.launch import spawn_workers
from minitrain.model import MiniGPTConfig, count_parameters
from minitrain.paths import relative
from minitrain.provenance import provenance, rank_facts
from minitrain.snapshot import SNAPSHOTS, agree_on_snapshot, load_rank_state, save_snapshot
from minitrain.timing import (BY_NAME, VARIANTS, InstrumentedHook, attach_instrumented_hook, summarize,
                             timed_backward)
from minitrain.train import build_model_for_corpus, log_step, seed_everything

HERE = Path(__file__).resolve().parent
PROGRESS = "progress.json"  # in SNAPSHOTS: rank 0's steps done so far, to count the steps a restart redoes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = LabArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--warmup", type=nonnegative_int, default=50, help="steps left out of the summary")
    p.add_argument("--batch-size", type=positive_int, default=16, help="sequences per rank per step")
    p.add_argument("--block-size", type=positive_int, default=64, help="tokens per sequence")
    p.add_argument("--lr", type=positive_float, default=3e-4)
    p.add_argument("--out", type=output_folder, default=HERE, help="output folder (default: this folder)")
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--timing", default=",".join(BY_NAME),
                   help="comma-separated timing variants: " + "; ".join(f"{v.name} = {v.label}" for v in VARIANTS))
    p.add_argument("--n-layer", type=positive_int, default=MiniGPTConfig.n_layer)
    p.add_argument("--n-head", type=positive_int, default=MiniGPTConfig.n_head)
    p.add_argument("--n-embd", type=positive_int, default=MiniGPTConfig.n_embd)
    p.add_argument("--comm", choices=["allreduce", "noop"], default="allreduce",
                   help="noop: DDP's no-op comm hook, gradients are never averaged (a control)")
    p.add_argument("--no-sync", action="store_true",
                   help="every backward under model.no_sync(): no all-reduce at all (a control)")
    p.add_argument("--track-drift", action="store_true",
                   help="log each step's largest parameter difference from rank 0")
    p.add_argument("--launcher", choices=["torchrun", "spawn"], default="torchrun")
    p.add_argument("--nproc", type=positive_int, default=2, help="processes, with --launcher spawn")
    p.add_argument("--snapshot-every", type=positive_int, default=None, metavar="K",
                   help="write a snapshot every K steps into OUT/snapshots and resume from the newest complete one")
    p.add_argument("--fail-at", type=fault, action="append", default=None, metavar="STEP:RANK[:ATTEMPT]",
                   help="a fault to watch a restart: rank RANK kills itself (SIGKILL) as step STEP begins, on "
                        "attempt ATTEMPT (torchrun's TORCHELASTIC_RESTART_COUNT; 0, the first, by default); repeatable")
    args = p.parse_args(argv)
    unknown = [name for name in args.timing.split(",") if name not in BY_NAME]
    if unknown:
        p.error(f"--timing {args.timing}: unknown variant {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    args.timing = args.timing.split(",")  # names: a spawned worker gets args pickled
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup}): "
                "the summary uses the steps after the warm-up")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd ({args.n_embd}) must be a multiple of --n-head ({args.n_head}): "
                "each head gets n_embd / n_head dimensions")
    return args


def fault(text: str) -> tuple[int, int, int]:
    """STEP:RANK or STEP:RANK:ATTEMPT, whole numbers of at least 0."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not STEP:RANK or STEP:RANK:ATTEMPT (whole numbers), e.g. 6:1")
    step, rank, attempt = (int(part) for part in parts + ["0"] * (3 - len(parts)))
    return step, rank, attempt


def check_shards(shard, rank: int, world_size: int, corpus_total: int) -> dict:
    """Every rank reports its shard; rank 0 checks the counts add up and the first sentences differ."""
    print(f"[rank {rank}] pid {os.getpid()}, shard: {shard.num_sentences} sentences, "
          f"first it trains on: {shard.first_sentence!r}", flush=True)
    reports = [None] * world_size
    dist.all_gather_object(reports, (shard.num_sentences, shard.first_sentence))
    counts, firsts = [c for c, _ in reports], [f for _, f in reports]
    if sum(counts) != corpus_total or len(set(firsts)) != world_size:
        raise RuntimeError(f"sharding is broken: counts {counts} (corpus {corpus_total}), firsts {firsts}")
    if is_main_process():
        print(f"shards ok: {' + '.join(map(str, counts))} = {corpus_total} sentences, "
              f"{world_size} different first sentences", flush=True)
    return {"shard_sentences": counts, "first_sentences": firsts}


def run(args: argparse.Namespace) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # torchrun's restarts of the workers so far
    if attempt:
        print(f"[rank {os.environ.get('RANK')}] attempt {attempt}: torchrun's agent restarted the workers "
              f"(pid {os.getpid()})", flush=True)
    rank, world_size = init_distributed("gloo")
    seed_everything(SEED_BASE + rank)  # different per rank; DDP broadcasts rank 0's weights anyway
    if is_main_process() and args.corpus_dir == DEFAULT_CORPUS_DIR:
        ensure_corpus(args.corpus_dir)  # the default corpus is generated on first use
    barrier()
    try:
        model, _ = build_model_for_corpus(args.corpus_dir, args.block_size, n_layer=args.n_layer,
                                          n_head=args.n_head, n_embd=args.n_embd)
        shard = make_shard(rank, world_size, args.corpus_dir, batch_size=args.batch_size,
                           block_size=args.block_size)
    except (CorpusError, OSError, ValueError) as e:  # bad input: say what and how to fix, no traceback
        print(f"[rank {rank}] error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    model = wrap_for_ddp(model)
    # DDP's own all-reduce with a stopwatch (or, as a control, the no-op hook: no communication)
    hook = attach_instrumented_hook(model, comm=args.comm)
    timers = {BY_NAME[name].field: BY_NAME[name].attach(hook) for name in args.timing}
    shards = check_shards(shard, rank, world_size, len(load_corpus(args.corpus_dir / "train.jsonl")))
    ranks = [None] * world_size  # each rank's pid, cores and threads, for run.json
    dist.all_gather_object(ranks, {"rank": rank} | rank_facts())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    tokens = args.batch_size * args.block_size * world_size  # global tokens per step

    records, start, restart = [], 0, None
    if args.snapshot_every or args.fail_at or attempt:
        restart = {"attempt": attempt, "max_restarts": int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")),
                   "snapshot_every": args.snapshot_every, "faults": args.fail_at}
    if args.snapshot_every:
        records, start = resume(args, model, optimizer, shard, world_size, restart)
    for step in range(start, args.steps):
        if args.fail_at and (step, rank, attempt) in args.fail_at:
            print(f"[rank {rank}] fault injected: pid {os.getpid()} kills itself with SIGKILL as step {step} "
                  f"begins (attempt {attempt})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.perf_counter()
        batch = next(shard)
        with model.no_sync() if args.no_sync else contextlib.nullcontext():
            loss = model(batch).loss
            t1 = time.perf_counter()
            timed_backward(loss, list(timers.values()))
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        record = {
            "step": step, "loss": loss.item(), "step_ms": (t3 - t0) * 1e3,
            "forward_ms": (t1 - t0) * 1e3, "backward_ms": (t2 - t1) * 1e3,
            "optimizer_ms": (t3 - t2) * 1e3, "tokens": tokens,
        } | {v.field: timers[v.field].pop_ms() if v.field in timers else None for v in VARIANTS}
        if args.track_drift:
            record["max_param_diff"] = drift_from_rank0(unwrap(model))
        records.append(record)
        if is_main_process():
            log_step(step, record["loss"], t3 - t0,
                     **{v.field: record[v.field] for v in VARIANTS if record[v.field] is not None})
        if args.snapshot_every:
            snapshot_step(args, step + 1, model, optimizer, shard, records, world_size, attempt)

    # Each rank stages its own files and moves them into place once every rank has written: the
    # folder may be shared (one machine) or each machine's own disk (two machines).
    staging = args.out / f".staging-{world_size}proc"
    if is_main_process():
        shutil.rmtree(staging, ignore_errors=True)  # a crashed run's leftovers
    barrier()
    staging.mkdir(parents=True, exist_ok=True)
    mine = [f"state-rank-{rank}.pt"] + (["timings.jsonl", "run.json"] if is_main_process() else [])
    torch.save(unwrap(model).state_dict(), staging / mine[0])
    if is_main_process():
        write_rank0_files(staging, args, records, model, hook, world_size,
                          shards | {"ranks": ranks} | ({"restart": restart} if restart else {}))
    barrier()  # every rank's files are on disk before anything moves into place
    for name in mine:
        os.replace(staging / name, args.out / name)
    barrier()
    with contextlib.suppress(FileNotFoundError):  # on a shared folder another rank may have removed it
        staging.rmdir()
    if is_main_process():
        print(f"wrote {', '.join(sorted(p.name for p in args.out.glob('*') if p.suffix in ('.pt', '.jsonl', '.json')))} "
              f"to {relative(args.out)}", flush=True)
    cleanup()


def training_config(args: argparse.Namespace, world_size: int) -> dict:
    """What a snapshot must have been taken with to be resumed by this run."""
    return {"world_size": world_size, "batch_size": args.batch_size, "block_size": args.block_size, "lr": args.lr,
            "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd, "comm": args.comm,
            "no_sync": args.no_sync}


def snapshot_step(args: argparse.Namespace, done: int, model, optimizer, shard, records: list[dict],
                  world_size: int, attempt: int) -> None:
    """After each step: rank 0 notes the steps done; every K steps every rank writes a snapshot."""
    root = args.out / SNAPSHOTS
    if done % args.snapshot_every == 0 or done == args.steps:
        # everything the next steps depend on: weights, AdamW's moments and step counts, where this
        # rank's data stream is, and the RNGs (dropout's, if the model had any)
        state = {"step": done, "config": training_config(args, world_size), "model": unwrap(model).state_dict(),
                 "optimizer": optimizer.state_dict(), "data": shard.state_dict(),
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}, "records": records}
        folder = save_snapshot(root, done, state)
        if is_main_process():
            print(f"snapshot {relative(folder)}: step {done}, {world_size} ranks", flush=True)
    if is_main_process():
        write_json(root / PROGRESS, {"attempt": attempt, "steps_done": done})


def resume(args: argparse.Namespace, model, optimizer, shard, world_size: int, restart: dict) -> tuple[list[dict], int]:
    """Load the newest complete snapshot under OUT/snapshots into the model, optimizer, data stream and
    RNGs; return the records so far and the step to go on from (0 when there is none)."""
    root = args.out / SNAPSHOTS
    if is_main_process():
        root.mkdir(parents=True, exist_ok=True)
    barrier()
    rank = dist.get_rank()
    previous = json.loads((root / PROGRESS).read_text()) if (root / PROGRESS).is_file() else None
    found = agree_on_snapshot(root)
    if is_main_process():
        for line in found.skipped:
            print(line, flush=True)
    restart.update({"skipped": found.skipped, "resumed_from": relative(found.folder) if found.folder else None,
                    "resumed_from_step": found.step,
                    "previous_steps_done": previous["steps_done"] if previous else None,
                    "steps_redone": previous["steps_done"] - (found.step or 0) if previous else 0})
    if found.folder is None:
        if is_main_process() and previous:
            print(f"no complete snapshot in {relative(root)}: starting again at step 0 "
                  f"({previous['steps_done']} steps redone)", flush=True)
        return [], 0
    state = load_rank_state(found.folder, rank)
    wrong = {k: (state["config"].get(k), v) for k, v in training_config(args, world_size).items()
             if state["config"].get(k) != v}
    if wrong or found.step > args.steps:
        what = (", ".join(f"{k} {old} (this run: {new})" for k, (old, new) in wrong.items()) if wrong
                else f"step {found.step}, past --steps {args.steps}")
        if is_main_process():  # every rank stops; one line says why
            print(f"[rank {rank}] error: {relative(found.folder)} was taken with {what}: use another --out, or "
                  f"delete {relative(root)} to start afresh", file=sys.stderr, flush=True)
        sys.exit(2)
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    shard.load_state_dict(state["data"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    if is_main_process():
        redone = (f"the previous attempt had done {previous['steps_done']} steps: {restart['steps_redone']} redone"
                  if previous else "no record of a previous attempt")
        print(f"resumed from {relative(found.folder)}: step {found.step} of {args.steps} "
              f"(attempt {restart['attempt']}; {redone})", flush=True)
    return state["records"], found.step


def drift_from_rank0(model: torch.nn.Module) -> float:
    """Largest absolute difference between this rank's parameters and rank 0's, on every rank."""
    mine = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    diff = (mine - rank0).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return diff.item()


def write_rank0_files(staging: Path, args: argparse.Namespace, records: list[dict], model,
                      hook: InstrumentedHook, world_size: int, shards: dict) -> None:
    """timings.jsonl (one line a step) and run.json (configuration, summary, provenance)."""
    with open(staging / "timings.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    measured = records[args.warmup:]
    summary = {key: summarize([r[key] for r in measured])
               for key in ("step_ms", "forward_ms", "backward_ms", "optimizer_ms", *(v.field for v in VARIANTS))
               if measured[0][key] is not None}
    # loss.backward() minus the hook's all-reduce, step by step (medians do not subtract): backward's
    # compute and DDP's bucket copies; with variant A on, its two barriers too (the repeats run without)
    summary["backward_outside_hook_ms"] = summarize([r["backward_ms"] - (r["allreduce_ms"] or 0.0) for r in measured])
    tokens_per_sec = [r["tokens"] / (r["step_ms"] / 1e3) for r in measured]
    run_info = {
        "run_id": secrets.token_hex(4),  # names this run wherever its numbers are shown
        "world_size": world_size,
        "launcher": args.launcher,
        "timing": args.timing,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "batch_size_per_rank": args.batch_size,
        "block_size": args.block_size,
        "lr": args.lr,
        "model_config": {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd},
        "comm": args.comm,
        "no_sync": args.no_sync,
        "seed_base": SEED_BASE,
        "threads_per_rank": torch.get_num_threads(),
        "model_params": count_parameters(unwrap(model)),
        "buckets": [{"index": i, "bytes": b["bytes"]} for i, b in sorted(hook.buckets.items())] or None,
        "summary": summary,
        "tokens_per_sec": summarize(tokens_per_sec) | {"min": min(tokens_per_sec), "max": max(tokens_per_sec)},
        **shards,
        **provenance(args.corpus_dir),
        "command": launch_command(args, world_size),
    }
    (staging / "run.json").write_text(json.dumps(run_info, indent=2) + "\n")


def launch_command(args: argparse.Namespace, world_size: int) -> str:
    """The command line that started this run, as a reader would type it from the repository
    (paths inside it relative, so the command works on any machine)."""
    if "MINITRAIN_LAUNCH_COMMAND" in os.environ:  # the lab's loopback-only torchrun
        words = os.environ["MINITRAIN_LAUNCH_COMMAND"].split()
    elif args.launcher == "spawn":
        words = ["python", *sys.argv]
    else:
        words = ["torchrun", "--standalone", f"--nproc-per-node={world_size}", *sys.argv]
    return " ".join(relative(w) if os.path.isabs(w) else w for w in words)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.launcher == "spawn":
        spawn_workers(run, args.nproc, args)
    else:
        run(args)


if __name__ == "__main__":
    main()
