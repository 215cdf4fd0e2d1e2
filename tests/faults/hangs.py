"""One small worker the hang tests run a few ways, `python hangs.py KIND` under the lab's torchrun or
`spawn_workers(hangs.main, 2, KIND)`: each KIND is a mistake a learner's distributed code makes.
The line where a rank waits carries a `# waits:` comment naming the KIND (the tests look it up)."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed, wrap_for_ddp
from minitrain.lab.grading.graders.running import silence_output

KINDS = ("barrier-on-one-rank", "skipped-collective", "mismatched-shapes", "no-backward", "no-cleanup")


def main(kind: str, log_dir: str = "") -> None:
    """A DDP step on a tiny model, with `kind`'s mistake in it (one of KINDS); with `log_dir`, each rank's
    output goes to log_dir/rank-R.log (spawn_workers' runs, whose output the tests cannot capture)."""
    if log_dir:
        silence_output(Path(log_dir) / f"rank-{os.environ['RANK']}.log")
    rank, _ = init_distributed("gloo")
    print(f"rank {rank} ready, pid {os.getpid()}, at {time.monotonic():.3f}", flush=True)
    model = wrap_for_ddp(torch.nn.Linear(4, 1))
    loss = model(torch.ones(2, 4)).sum()
    if kind == "barrier-on-one-rank" and rank == 0:
        dist.barrier()  # waits: barrier-on-one-rank
    if kind == "mismatched-shapes":
        dist.all_reduce(torch.ones(3 if rank == 0 else 5))  # waits: mismatched-shapes
    if kind != "no-backward" or rank == 0:
        loss.backward()  # waits: no-backward (rank 1 never calls it)
    if kind == "skipped-collective" and rank == 0:
        dist.all_reduce(torch.ones(3))  # waits: skipped-collective (rank 1 never calls it)
    if kind == "no-cleanup":
        print(f"rank {rank} ends without cleanup()", flush=True)
        return
    cleanup()  # waits: cleanup (a rank whose peer is stuck elsewhere)
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
