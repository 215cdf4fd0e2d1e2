"""Small scripts the fault tests launch with the lab's launcher: `python workers.py MODE`."""

import os
import sys
import time

import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed

if __name__ == "__main__":
    mode = sys.argv[1]
    rank, world_size = init_distributed("gloo")
    print(f"rank {rank} ready, pid {os.getpid()}", flush=True)
    if mode == "hang" and rank == 1:
        time.sleep(600)  # a stuck worker: never reaches the all-reduce
    elif mode == "serve":
        time.sleep(float(sys.argv[2]))  # hold the process group open while a test looks at it
    t = torch.ones(4)
    dist.all_reduce(t)
    cleanup()
    print(f"rank {rank} done, sum {t.tolist()}", flush=True)
