"""Small workers the fault tests launch: `python workers.py MODE [SECONDS | FILE]` under the lab's
torchrun, or `spawn_workers(workers.main, 2, MODE, ...)`."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed


def main(mode: str, *args: str) -> None:
    """Join the group, say "ready", then: hang (rank 1 never all-reduces), serve (hold the group
    open for SECONDS while a test looks at it), hold (the same until FILE exists, 60 s at most), or
    clean; then one all-reduce and a clean exit."""
    rank, world_size = init_distributed("gloo")
    restarts = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "unset")  # torchrun's, from its --max-restarts
    print(f"rank {rank} ready, pid {os.getpid()}, max restarts {restarts}", flush=True)
    if mode == "hang" and rank == 1:
        time.sleep(600)  # a stuck worker: never reaches the all-reduce
    elif mode == "serve":
        time.sleep(float(args[0]))
    elif mode == "hold":
        deadline = time.monotonic() + 60
        while not Path(args[0]).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    t = torch.ones(4)
    dist.all_reduce(t)
    cleanup()
    print(f"rank {rank} done, sum {t.tolist()}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
