"""A thin wrapper over torch.distributed for the lab: init, wrap, rank-0 gate, barrier, cleanup;
and a worker's (or launcher's) life tied to its parent's."""

import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import psutil
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from minitrain.cli import collective_timeout_s

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# Set by whoever starts a process that must die with it (the launcher for its workers, spawn_workers,
# run_streaming for the launcher): the pid that process's parent must be.
WATCH_PID = "MINITRAIN_WATCH_PID"
PARENT_POLL_SECONDS = 0.5
_WATCHER = "minitrain-parent-watch"


def collective_timeout() -> timedelta:
    """How long a collective waits for a peer: $MINITRAIN_COLLECTIVE_TIMEOUT seconds, 60 by default
    (a lost peer must end the run in seconds, not after torch's 30 minutes). A bad value raises
    minitrain.cli.SettingError, a ValueError naming the variable and the fix."""
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


def init_distributed(backend: str = "gloo", timeout: timedelta | None = None) -> tuple[int, int]:
    """Join the process group described by torchrun's environment; return (rank, world_size).

    `timeout` defaults to collective_timeout(). With libuv off (Windows, or USE_LIBUV=0) and the
    launcher hosting the store, the client store is made here: torch's env:// makes that one with
    libuv whatever USE_LIBUV says, which fails on Windows.
    """
    missing = [v for v in TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"init_distributed() needs the variables torchrun sets, missing: {', '.join(missing)}. "
            "Launch the script with `torchrun --standalone --nproc-per-node=2 SCRIPT` "
            "(or `python -m torch.distributed.run ...`)."
        )
    if backend != "gloo":
        raise ValueError(f"this lab runs on CPUs with the gloo backend only, got {backend!r}")
    timeout = collective_timeout() if timeout is None else timeout
    if not on_windows():  # gloo talks over the interface its hostname resolves to; keep it on loopback
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    if not dist.is_initialized():
        exit_with_parent(f"rank {os.environ['RANK']}")  # a killed launcher must not leave it training
        if use_libuv() or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            dist.init_process_group(backend=backend, timeout=timeout)
        else:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                                  is_master=False, timeout=timeout, use_libuv=False)
            dist.init_process_group(backend=backend, store=dist.PrefixStore("default_pg", store),
                                    rank=rank, world_size=world_size, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def exit_with_parent(what: str, on_gone: Callable[[], None] | None = None,
                     only_when_asked: bool = False) -> None:
    """End this process soon after its parent dies, even by SIGKILL (Linux and macOS).

    A daemon thread compares os.getppid() with the parent seen at start every 0.5 s; on a change
    it prints one line on stderr naming `what` and the lost parent, calls `on_gone`, then
    os._exit(1). A parent named by WATCH_PID that is already gone ends this process at once; a
    WATCH_PID naming another live process was inherited from further up and is ignored. No watch
    under pid 1, nor, with `only_when_asked`, unless WATCH_PID names this parent.
    """
    parent = os.getppid()
    named = int(os.environ.get(WATCH_PID, "0"))
    if named and named != parent and not running(named):
        _parent_gone(what, named, None)  # it died before this process could watch it
    if parent == 1 or (only_when_asked and named != parent):
        return
    if not any(t.name == _WATCHER for t in threading.enumerate()):
        threading.Thread(target=_watch, args=(what, parent, on_gone), name=_WATCHER, daemon=True).start()


def running(pid: int) -> bool:
    """True while `pid` runs; a zombie (ended, not yet reaped by its parent) counts as gone."""
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _watch(what: str, parent: int, on_gone: Callable[[], None] | None) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    _parent_gone(what, parent, on_gone)


def _parent_gone(what: str, parent: int, on_gone: Callable[[], None] | None) -> None:
    try:
        print(f"error: {what} (pid {os.getpid()}) stops: its parent, pid {parent}, is gone "
              "(killed outright, or crashed)", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr may be a pipe nobody reads any more
    if on_gone is not None:
        on_gone()
    os._exit(1)


def wrap_for_ddp(model: torch.nn.Module, bucket_cap_mb: float | None = None) -> TorchDDP:
    """Wrap with PyTorch DDP defaults (or a bucket cap, in MiB); DDP broadcasts rank 0's parameters
    to every rank here. None keeps DDP's default caps: 1 MiB for the first bucket, 25 MiB after."""
    if not dist.is_initialized():
        raise RuntimeError("wrap_for_ddp() needs a process group: call init_distributed() first")
    return TorchDDP(model, bucket_cap_mb=bucket_cap_mb)


def rebuilt_buckets(ddp_model: TorchDDP) -> tuple[list[int], list[int]]:
    """DDP's own record of its buckets after the rebuild at step 1: each bucket's bytes, and the
    parameter indices in bucket order (DDP logs them as text: "148608, 148992")."""
    data = ddp_model._get_ddp_logging_data()
    numbers = lambda key: [int(n) for n in re.findall(r"\d+", str(data.get(key, "")))]  # noqa: E731
    return numbers("rebuilt_bucket_sizes"), numbers("rebuilt_per_bucket_param_indices")


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside a DDP wrapper (state-dict keys without the `module.` prefix)."""
    return model.module if isinstance(model, TorchDDP) else model


def is_main_process() -> bool:
    """True on rank 0, and in a plain single process with no process group."""
    return not dist.is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if dist.is_initialized():
        dist.barrier()


def cleanup() -> None:
    """Destroy the process group; safe to call twice.

    The barrier matters: a rank that destroys the group while its peer is still mid-collective
    makes the peer abort at exit ("terminate called without an active exception").
    """
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
