"""What a rank needs before it joins a gloo process group, on every platform: torchrun's variables,
gloo kept on the loopback interface, a collective timeout of seconds rather than torch's 30 minutes,
a life tied to its launcher's, and, on Windows, a rendezvous store without libuv."""

import os
import socket
import sys
from datetime import timedelta

import psutil
import torch.distributed as dist

from minitrain.cli import collective_timeout_s
from minitrain.hang_report import watched_group_timeout
from minitrain.parent_watch import exit_with_parent

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def collective_timeout() -> timedelta:
    """How long a collective waits for a peer: $MINITRAIN_COLLECTIVE_TIMEOUT seconds, 60 by default.
    A bad value raises minitrain.cli.SettingError, a ValueError naming the variable and the fix."""
    return timedelta(seconds=collective_timeout_s())


def on_windows() -> bool:
    return sys.platform == "win32"


def use_libuv() -> bool:
    """Whether TCPStores use libuv, as torch decides it for init_method URLs: $USE_LIBUV, by default
    on, except on Windows, whose official wheels are built without libuv (pytorch/pytorch#139990)."""
    return os.environ.get("USE_LIBUV", "0" if on_windows() else "1") == "1"


def loopback_interface() -> str:
    """Name of the network interface holding 127.0.0.1 ("lo" on Linux, "lo0" on macOS)."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    return names[0] if names else "lo"


def prepare_rank(timeout: timedelta | None = None) -> dict:
    """Check torchrun's variables, keep gloo on loopback, tie this rank to its launcher and watch its
    collectives (hang_report: a wait longer than `timeout`, default collective_timeout(), ends the rank
    naming where); return the keyword arguments for dist.init_process_group besides the backend: gloo's
    timeout (a few seconds later) and, with libuv off and the launcher hosting the store, the client store
    (torch's env:// would make it with libuv whatever USE_LIBUV says, which fails on Windows)."""
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_distributed() needs the variables torchrun sets, missing: {', '.join(missing)}. "
            "Launch the script with `torchrun --standalone --nproc-per-node=2 SCRIPT` "
            "(or `python -m torch.distributed.run ...`)."
        )
    timeout = collective_timeout() if timeout is None else timeout
    if not on_windows():  # gloo talks over the interface its hostname resolves to; keep it on loopback
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    exit_with_parent(f"rank {rank}")  # a killed launcher must not leave it training
    group_timeout = watched_group_timeout(rank, timeout)  # a rank stuck in a collective names where, and ends
    if dist.is_initialized() or use_libuv() or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {"timeout": group_timeout}
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=False, timeout=timeout, use_libuv=False)
    return {"timeout": group_timeout, "store": dist.PrefixStore("default_pg", store), "rank": rank,
            "world_size": world_size}
