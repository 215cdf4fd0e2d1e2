"""What each rank runs in the all-reduce benchmark (minitrain.measure.allreduce_bench starts it): the plan, the
timed all-reduces at every size, then the raw-TCP reference, bytes streamed one way over a 127.0.0.1 socket.
"""

import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed
from minitrain.measure.allreduce import time_allreduce

KiB, MiB = 1024, 1024 * 1024
CHUNK = 4 * MiB  # socket send/receive size: big enough that Python's per-call cost vanishes


def iterations(nbytes: int) -> int:
    """Timed iterations for a message size: 200, or fewer where 200 would move more than 2 GiB
    (from 16 MiB on: 2 GiB per size), never fewer than 20."""
    return max(20, min(200, 2048 * MiB // nbytes))


@dataclass(frozen=True)
class Plan:
    """The message sizes, the iterations per size (None: `iterations(size)`) and the loopback run."""

    sizes: tuple[int, ...] = tuple(4 * KiB * 2**k for k in range(15))  # 4 KiB ... 64 MiB, powers of 2
    warmup: int = 5
    iterations: int | None = None
    loopback_bytes: int = 64 * MiB
    loopback_repeats: int = 10

    @classmethod
    def quick(cls) -> "Plan":
        """3 sizes, 5 iterations: a few seconds, for tests."""
        return cls(sizes=(4 * KiB, 256 * KiB, 4 * MiB), warmup=2, iterations=5, loopback_bytes=16 * MiB,
                   loopback_repeats=3)


def loopback_gbps(rank: int, nbytes: int, repeats: int) -> list[float]:
    """GB/s of `repeats` one-way transfers of `nbytes` from rank 1 to rank 0 over 127.0.0.1."""
    if rank == 0:
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = [server.getsockname()[1]]
            dist.broadcast_object_list(port, src=0)
            conn, _ = server.accept()
        with conn:
            buffer = memoryview(bytearray(CHUNK))
            rates = []
            for _ in range(repeats):
                start = time.perf_counter()
                conn.sendall(b"g")  # go: the clock starts before the sender sees this byte
                received = 0
                while received < nbytes:
                    got = conn.recv_into(buffer, min(CHUNK, nbytes - received))
                    if not got:
                        raise ConnectionError("the sending rank closed the socket early")
                    received += got
                rates.append(nbytes / (time.perf_counter() - start) / 1e9)
        return rates
    port = [None]
    dist.broadcast_object_list(port, src=0)
    payload = memoryview(bytes(CHUNK))
    with socket.create_connection(("127.0.0.1", port[0])) as conn:
        for _ in range(repeats):
            conn.recv(1)
            for offset in range(0, nbytes, CHUNK):
                conn.sendall(payload[:min(CHUNK, nbytes - offset)])
    return []


def bench_worker(plan: Plan, raw_path: str) -> None:
    """One rank: time the all-reduce at every size, then loopback TCP; rank 0 saves the raw times."""
    rank, world_size = init_distributed("gloo")
    counts = [plan.iterations or iterations(nbytes) for nbytes in plan.sizes]
    raw = {"sizes": list(plan.sizes), "iterations": counts, "warmup": plan.warmup,
           "threads_per_rank": torch.get_num_threads(),
           "times_s": [time_allreduce(n, plan.warmup, iters, rank, world_size) for n, iters in zip(plan.sizes, counts)],
           "loopback_gbps": loopback_gbps(rank, plan.loopback_bytes, plan.loopback_repeats),
           "loopback_bytes": plan.loopback_bytes}
    if rank == 0:
        Path(raw_path).write_text(json.dumps(raw))
    cleanup()
