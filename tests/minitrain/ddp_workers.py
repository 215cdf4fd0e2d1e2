"""Worker functions for the real multi-process DDP tests (spawned, so they must be importable)."""

import os
from pathlib import Path

import torch

from minitrain.ddp import cleanup, init_distributed, unwrap, wrap_for_ddp
from minitrain.model import build_minigpt
from minitrain.script import run_setup, run_step, train_script
from minitrain.comm_hook import attach_instrumented_hook
from minitrain.timing import VARIANTS


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in unwrap(model).state_dict().items()}


def wrap_and_train(rank: int, world_size: int, corpus_dir: str, steps: int) -> dict:
    """train.py's Block C (setup, then `steps` of train_step) at block size 32, snapshots before and after
    wrapping (the wrapper given to setup sees the plain model)."""
    train = train_script()
    args = train.parse_args(["--corpus-dir", corpus_dir, "--block-size", "32", "--batch-size", "4"])
    seen = {}

    def wrap(model: torch.nn.Module) -> torch.nn.Module:
        seen["before"] = snapshot(model)
        return wrap_for_ddp(model)
    _, _, model, shard, optimizer = run_setup(train.setup, args, wrap)
    after = snapshot(model)
    for _ in range(steps):
        run_step(train.train_step, model, shard, optimizer, [])
    return {"before": seen["before"], "after": after, "final": snapshot(model), "first_sentence": shard.first_sentence}


def global_batches(steps: int, batch_size: int, vocab_size: int, block_size: int) -> list:
    """A fixed sequence of random (inputs, targets) batches, the same in every process."""
    g = torch.Generator().manual_seed(1234)
    return [(torch.randint(vocab_size, (batch_size, block_size), generator=g),
             torch.randint(vocab_size, (batch_size, block_size), generator=g)) for _ in range(steps)]


TINY = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)


def train_reference(batches: list, dtype: torch.dtype, rank: int | None = None, world_size: int = 1,
                    measured: list | None = None) -> dict[str, torch.Tensor]:
    """Train a tiny MiniGPT (seed 0) with AdamW through train.py's train_step (Block C's); under DDP each rank
    takes its half of each batch.

    With a `measured` list (under DDP only), every timing variant of minitrain.timing is attached
    as train.py attaches them, and each step appends {variant name: the ms it measured}."""
    torch.manual_seed(0)
    model = build_minigpt(**TINY).to(dtype)
    timers = {}
    if rank is not None:
        model = wrap_for_ddp(model)
        if measured is not None:
            hook = attach_instrumented_hook(model)
            timers = {v.name: v.attach(hook) for v in VARIANTS}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if rank is not None:
        batches = [(inputs.chunk(world_size)[rank], targets.chunk(world_size)[rank]) for inputs, targets in batches]
    step = train_script().train_step
    for batch in batches:
        run_step(step, model, iter([batch]), optimizer, list(timers.values()))
        if measured is not None:
            measured.append({name: timer.pop_ms() for name, timer in timers.items()})
    return snapshot(model)


def every_run(corpus_dir: str, out_dir: str, steps: int) -> None:
    """The tests' DDP runs in one process group (torchrun's), one after another, saved to rank-RANK.pt:
    wrap_and_train ("wrapped"), then each rank on its half of the same global batches in float64
    and float32 ("half-float64", "half-float32"), then float64 with every timing variant attached
    ("timed": the state and each step's measured ms); cleanup twice (the second call must be harmless)."""
    rank, world_size = init_distributed("gloo")
    runs = {"wrapped": wrap_and_train(rank, world_size, corpus_dir, steps)}
    batches = global_batches(steps, 8, TINY["vocab_size"], TINY["block_size"])
    for dtype_name in ("float64", "float32"):
        runs[f"half-{dtype_name}"] = train_reference(batches, getattr(torch, dtype_name), rank, world_size)
    measured: list = []
    runs["timed"] = {"state": train_reference(batches, torch.float64, rank, world_size, measured), "ms": measured}
    torch.save(runs, Path(out_dir) / f"rank-{rank}.pt")
    cleanup()
    cleanup()
    os.write(1, f"rank {rank} exited cleanly\n".encode())  # one write: two ranks share the output


def group_after_the_model(out_dir: str) -> None:
    """One rank that frees its DDP model after leaving the group (as a script's main() returns after cleanup()); it
    writes its thread count with the model and after, to rank-R.json. No TODO: the lab's prepare_rank and torch's."""
    import json
    import time

    import psutil
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from minitrain import hang_report
    from minitrain.gloo_setup import prepare_rank
    dist.init_process_group("gloo", **prepare_rank())  # prepare_rank starts the hang watch
    deadline = time.monotonic() + 10
    while not hang_report._GROUPS and time.monotonic() < deadline:  # the watch's first look at the group
        time.sleep(0.01)
    model = DistributedDataParallel(torch.nn.Linear(4, 4))
    threads = psutil.Process().num_threads()
    dist.barrier()
    dist.destroy_process_group()
    del model
    counts = {"with the model": threads, "after": psutil.Process().num_threads()}
    (Path(out_dir) / f"rank-{os.environ['RANK']}.json").write_text(
        json.dumps(counts))


def say_if_watched_at_exit() -> None:
    """Print, at exit, the hang watch threads still alive (atexit runs this after hang_report's stop_watching) and
    the process groups the watch still holds (none: stop_watching lets them go before Python finalizes)."""
    import threading

    from minitrain import hang_report
    watching = [t.name for t in threading.enumerate() if t.name == "minitrain-hang-watch"]
    held = [type(group).__name__ for group in hang_report._GROUPS]
    os.write(1, f"watching at exit: {watching}; groups held: {held}\n".encode())  # one write: ranks share the output


if __name__ == "__main__":
    # `torchrun --standalone --nproc-per-node=2 ddp_workers.py CORPUS_DIR OUT_DIR STEPS`: every run, then a clean exit
    import atexit
    import sys
    atexit.register(say_if_watched_at_exit)  # before init_distributed starts the watch: runs after its stop
    every_run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
