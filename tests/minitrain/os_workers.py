"""A worker for the per-OS tests (spawned, so importable): join the group, report the client store's
TCPStore backend, hold the group open until a file appears, then one all-reduce and a clean exit."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed


def main(hold_file: str) -> None:
    rank, _ = init_distributed("gloo")
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):  # PrefixStores around the TCPStore
        store = store.underlying_store
    print(f"rank {rank} ready, pid {os.getpid()}, client store with libuv: {store.libuvBackend}", flush=True)
    deadline = time.monotonic() + 60
    while not Path(hold_file).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    t = torch.ones(2)
    dist.all_reduce(t)
    cleanup()
    print(f"rank {rank} done, sum {t.tolist()}", flush=True)
