"""Small workers the fault tests launch: `python workers.py MODE [SECONDS | FILE]` under the lab's
torchrun, or `spawn_workers(workers.main, 2, MODE, ...)`."""

import ctypes
import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed

PR_GET_PDEATHSIG = 2  # prctl's option (linux/prctl.h)
FAULT_HANDLER_AT_START = faulthandler.is_enabled()  # before the lab's code (its hang watch) turns it on


def main(mode: str, *args: str) -> None:
    """Join the group, say "ready", then: hang (rank 1 never all-reduces), serve (hold the group
    open for SECONDS while a test looks at it), hold (the same until FILE exists, 60 s at most),
    start (print what this worker started with), or clean; then one all-reduce and a clean exit."""
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
    elif mode == "start":
        sys.stdout.write(f"rank {rank} started with {json.dumps(started_with(), sort_keys=True)}\n")  # one write
        sys.stdout.flush()
    t = torch.ones(4)
    dist.all_reduce(t)
    cleanup()
    print(f"rank {rank} done, sum {t.tolist()}", flush=True)


def started_with() -> dict:
    """What a worker's script sees of how it was started, that a test can compare between two launchers."""
    torchrun_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                     "MASTER_ADDR", "OMP_NUM_THREADS", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                     "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "GLOO_SOCKET_IFNAME")
    return {"argv": sys.argv, "name": __name__, "path0": sys.path[0], "threads": torch.get_num_threads(),
            "handlers": {s.name: str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                                                   signal.SIGQUIT, signal.SIGCHLD, signal.SIGPIPE)},
            "env": {k: os.environ.get(k) for k in torchrun_vars},
            "watches_its_parent": os.environ.get("MINITRAIN_WATCH_PID") == str(os.getppid()),
            "own_session": os.getsid(0) == os.getpid(), "fault_handler": FAULT_HANDLER_AT_START,
            "death_signal": death_signal(),
            "listening": len([c for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN]),
            "forked": "minitrain.launch" in psutil.Process().cmdline()}  # the launcher's command line


def death_signal() -> int | None:
    """The signal this process gets when its parent dies (Linux's PR_GET_PDEATHSIG), 0 for none."""
    if sys.platform != "linux":
        return None
    sig = ctypes.c_int()
    ctypes.CDLL(None).prctl(PR_GET_PDEATHSIG, ctypes.byref(sig))
    return sig.value


if __name__ == "__main__":
    main(*sys.argv[1:])
