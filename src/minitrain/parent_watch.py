"""A process that ends soon after its parent dies, even by SIGKILL (Linux and macOS): a worker whose
launcher was killed must not go on training, and a launcher whose notebook kernel died must not
leave its workers behind."""

import os
import sys
import threading
import time
from collections.abc import Callable

import psutil

# Set by whoever starts a process that must die with it (the launcher for its workers, spawn_workers,
# run_streaming for the launcher): the pid it must die with (its parent, or for a forkserver's child the
# process that asked for it).
WATCH_PID = "MINITRAIN_WATCH_PID"
PARENT_POLL_SECONDS = 0.5
_WATCHER = "minitrain-parent-watch"


def exit_with_parent(what: str, on_gone: Callable[[], None] | None = None,
                     only_when_asked: bool = False) -> None:
    """End this process soon after its parent dies.

    A daemon thread compares os.getppid() with the parent seen at start every 0.5 s; on a change
    it prints one line on stderr naming `what` and the lost parent, calls `on_gone`, then
    os._exit(1). A parent named by WATCH_PID that is already gone ends this process at once; a
    WATCH_PID naming another live process is watched too (a forkserver's child: the forkserver is
    its parent, the process that asked for it is named; or a name inherited from further up). No
    watch under pid 1, nor, with `only_when_asked`, unless WATCH_PID names this parent.
    """
    parent = os.getppid()
    named = int(os.environ.get(WATCH_PID, "0"))
    if named and named != parent and not running(named):
        _parent_gone(what, named, None)  # it died before this process could watch it
    if parent == 1 or (only_when_asked and named != parent):
        return
    if not any(t.name == _WATCHER for t in threading.enumerate()):
        also = named if named and named != parent else None
        threading.Thread(target=_watch, args=(what, parent, also, on_gone), name=_WATCHER, daemon=True).start()


def running(pid: int) -> bool:
    """True while `pid` runs; a zombie (ended, not yet reaped by its parent) counts as gone."""
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _watch(what: str, parent: int, also: int | None, on_gone: Callable[[], None] | None) -> None:
    while os.getppid() == parent and (also is None or running(also)):
        time.sleep(PARENT_POLL_SECONDS)
    _parent_gone(what, parent if os.getppid() != parent else also, on_gone)


def _parent_gone(what: str, parent: int, on_gone: Callable[[], None] | None) -> None:
    try:
        print(f"error: {what} (pid {os.getpid()}) stops: its parent, pid {parent}, is gone "
              "(killed outright, or crashed)", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr may be a pipe nobody reads any more
    if on_gone is not None:
        on_gone()
    os._exit(1)
