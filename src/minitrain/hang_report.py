"""A hang names itself: a watch thread in every rank ends a rank whose main thread waits in one collective
longer than the collective timeout, after one line naming the rank, the learner's line and the collective.

A rank whose collective receives a message longer than the buffer gloo posted for it (torch 2.13: another
shape or dtype on another rank, or another collective) aborts, gloo's gloo::EnforceNotMet thrown in its own
thread ("Received data size doesn't match expected size"), which no Python code can catch. A C++ terminate
handler installed here prints one line first, naming the rank, the learner's line and the collective; the C++
runtime's own then prints gloo's message. Other sizes need not abort: a shorter message is taken without a word
(the buffer's rest unchanged), and a message never sent leaves the rank waiting: the watch's case
(minitrain.diagnose.faults.all_reduce_sizes shows each).
"""

import atexit
import ctypes
import faulthandler
import os
import re
import sys
import sysconfig
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist

HANG_STATUS = 3  # a rank ended by the watch exits with this status
HANG_LINE = re.compile(r"\[rank (\d+)\] hangs at (\S+:\d+).*?: waits in (.+?) for [\d.]+ s")
MISMATCH = ("received a message of another size from another rank "  # gloo sees bytes: any cause, one message
            "(its call differs: another collective, shape or dtype)")
MISMATCH_LINE = re.compile(rf"\[rank (\d+)\] (\S+:\d+).*?: (.+?) {re.escape(MISMATCH)}")
TORCH_DIR = str(Path(torch.__file__).parent) + os.sep
MINITRAIN_DIR = str(Path(__file__).parent) + os.sep
LIBRARY_DIRS = tuple({TORCH_DIR, *(str(Path(sysconfig.get_paths()[k])) + os.sep
                                   for k in ("stdlib", "purelib", "platlib"))})  # not the learner's code
C10D_FILE = os.path.join(TORCH_DIR, "distributed", "distributed_c10d.py")
BACKWARD_FILE = os.path.join(TORCH_DIR, "autograd", "graph.py")
GLOO_GRACE = timedelta(seconds=5)  # gloo's own timeout comes this much later: the watch reports first
_WATCHER = "minitrain-hang-watch"
_STOP = threading.Event()
_GROUPS: list = []  # every default group this rank joined, with its threads and sockets, until exit (_hold_the_group)


def watch_collectives(rank: int, timeout_s: float) -> None:
    """Start (once per process) a daemon thread that looks at the main thread every timeout_s / 10 s
    (1 s at most) and ends this process with HANG_STATUS once one collective call has lasted timeout_s
    (one look later: a peer stuck as well gets to report too); at exit, stop_watching ends it."""
    if any(t.name == _WATCHER for t in threading.enumerate()):
        return
    faulthandler.enable(all_threads=True)  # any other abort: the stacks show the line
    main = threading.main_thread().ident
    _name_aborts(rank, main)
    watcher = threading.Thread(target=_watch, args=(rank, timeout_s, main), name=_WATCHER, daemon=True)
    watcher.start()
    atexit.register(stop_watching, watcher)


def stop_watching(watcher: threading.Thread) -> None:
    """At exit, before Python finalizes: end the watch and wait for it (atexit, in watch_collectives)."""
    # Its last look may hold the last collective's frame, and so that collective's Work. Dropped by this
    # thread while Python finalizes, pybind11 lets go of the GIL to destroy the Work, Python 3.11 ends a
    # thread that takes it back then (pthread_exit), and unwinding a noexcept C++ frame aborts the rank:
    # "terminate called without an active exception" (about 1 exit in 12 under load).
    _STOP.set()
    watcher.join(timeout=5)  # a look takes microseconds; a watch stuck printing must not hold the exit
    # The held groups go now, before Python finalizes: their Python objects let go of the GIL to destroy them, so
    # gloo's threads may take it to free their last Work. Destroyed while Python finalizes, a thread that takes the
    # GIL is ended mid-destructor and the rank aborts ("terminate called without an active exception").
    _GROUPS.clear()


def watched_group_timeout(rank: int, timeout: timedelta) -> timedelta:
    """Watch this rank's collectives with `timeout`; return the process group's own, GLOO_GRACE later (a
    backstop: the watch names the hang before gloo raises its "Timed out waiting" naming nothing)."""
    watch_collectives(rank, timeout.total_seconds())
    return timeout + GLOO_GRACE


def _watch(rank: int, timeout_s: float, main: int) -> None:
    waiting, since, every_s = None, time.monotonic(), min(1.0, timeout_s / 10)
    while not _STOP.wait(every_s if _GROUPS else min(every_s, 0.01)):  # often until the group is joined
        _hold_the_group()
        frame = sys._current_frames().get(main)
        call = collective_call(frame)  # a frame object: the same one as long as the same call lasts
        if call is None or call is not waiting:
            waiting, since = call, time.monotonic()
        elif time.monotonic() - since >= timeout_s:
            print(hang_line(rank, frame, timeout_s), file=sys.stderr, flush=True)
            time.sleep(1.5 * every_s)
            os._exit(HANG_STATUS)
        del frame, call


def _hold_the_group() -> None:
    """Keep a Python reference to the default process group, once it exists, until stop_watching at exit.

    Else a DDP model freed after destroy_process_group() may drop the group's last reference from its C++ Reducer,
    whose pybind11 holder keeps the GIL while ~ProcessGroupGloo joins gloo's threads, one of which may wait for the
    GIL to free a finished Work's tensors: both wait forever (pytorch/pytorch#56297). The group's Python object lets
    go of the GIL before destroying it. It matters in ranks forked from a process that imported torch._dynamo (the
    lab's warm ranks and forked torchrun workers); in a new interpreter, torch.distributed.nn's default arguments
    hold the group already. Not covered: ranks without this watch, a DDP model on another group."""
    if dist.is_available() and dist.is_initialized():
        group = dist.group.WORLD
        if group is not None and not any(held is group for held in _GROUPS):
            _GROUPS.append(group)


_TERMINATE = ctypes.CFUNCTYPE(None)  # a C++ terminate handler: void (*)()
_KEPT: list = []  # the installed handler, alive as long as the process (ctypes frees a callback nobody holds)


def _name_aborts(rank: int, main: int) -> None:
    """Install a C++ terminate handler (std::set_terminate of the runtime torch links) that prints
    mismatch_line when the main thread waits in a collective, then calls the runtime's own handler, which
    prints the exception's message and aborts. Where the runtime is not found (Windows), nothing."""
    try:
        set_terminate = ctypes.CDLL(torch._C.__file__)._ZSt13set_terminatePFvvE  # its dependencies' symbols too
    except (OSError, AttributeError):
        return
    set_terminate.restype, set_terminate.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

    @_TERMINATE
    def on_terminate() -> None:  # in gloo's thread: ctypes takes the GIL, which the waiting main thread released
        try:
            frame = sys._current_frames().get(main)
            if collective_call(frame) is not None:
                print(mismatch_line(rank, frame), file=sys.stderr, flush=True)
            del frame
        finally:
            if previous:
                _TERMINATE(previous)()
            os.abort()  # the runtime's handler aborts; without one, abort here

    _KEPT.append(on_terminate)
    previous = set_terminate(ctypes.cast(on_terminate, ctypes.c_void_p))
    # the runtime's own handler again at exit: a terminate while Python finalizes must not wait for the GIL
    atexit.register(set_terminate, previous)


def collective_call(frame: FrameType | None) -> FrameType | None:
    """The frame of the collective `frame`'s thread waits in (the outermost torch.distributed function, the
    one the learner called, or autograd's backward, where DDP's all-reduce waits), or None."""
    found = None
    while frame is not None:
        code = frame.f_code
        if code.co_filename == C10D_FILE and not code.co_name.startswith("_"):
            found = frame
        elif found is None and code.co_filename == BACKWARD_FILE and code.co_name == "_engine_run_backward":
            return frame
        frame = frame.f_back
    return found


def collective_name(call: FrameType) -> str:
    """`barrier`, `all_reduce`, ...: or DDP's gradient all-reduce, for a backward."""
    name = call.f_code.co_name
    return "backward (DDP's gradient all-reduce)" if name == "_engine_run_backward" else name


def learner_line(frame: FrameType | None) -> str:
    """`train.py:87 in train`: the innermost frame outside the libraries (torch, Python's own) and minitrain
    (else outside the libraries), with `(via ddp.py:56 in barrier)` when minitrain's frame is innermost."""
    frames = []
    while frame is not None:
        if not frame.f_code.co_filename.startswith((*LIBRARY_DIRS, "<")):  # "<string>": python -c, a forkserver
            frames.append(frame)
        frame = frame.f_back
    if not frames:
        return "?"
    outside = next((f for f in frames if not f.f_code.co_filename.startswith(MINITRAIN_DIR)), frames[0])
    via = "" if outside is frames[0] else f" (via {_place(frames[0])})"
    return _place(outside) + via


def _place(frame: FrameType) -> str:
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} in {frame.f_code.co_name}"


def hang_line(rank: int, frame: FrameType | None, timeout_s: float) -> str:
    """The watch's report: `[rank 0] hangs at train.py:87 in train: waits in barrier for 60 s ...`."""
    call = collective_call(frame)
    return (f"[rank {rank}] hangs at {learner_line(frame)}: waits in {collective_name(call)} for {timeout_s:g} s "
            "(the collective timeout): the other ranks never joined it")


def mismatch_line(rank: int, frame: FrameType | None) -> str:
    """The terminate handler's line: `[rank 0] train.py:87 in train: all_reduce received a message of another size ...`."""
    return (f"[rank {rank}] {learner_line(frame)}: {collective_name(collective_call(frame))} {MISMATCH} "
            "(gloo aborts this rank; its message follows)")


def named_hang(text: str) -> str | None:
    """`hangs at train.py:87 on rank 0 (waits in barrier)` from the first watch report in `text`, else None."""
    found = HANG_LINE.search(text)
    return None if found is None else f"hangs at {found[2]} on rank {found[1]} (waits in {found[3]})"


def named_mismatch(text: str) -> str | None:
    """`all_reduce received a message of another size ... at train.py:87 on rank 0` from the first terminate
    handler's line in `text`, else None."""
    found = MISMATCH_LINE.search(text)
    return None if found is None else f"{found[3]} {MISMATCH} at {found[2]} on rank {found[1]}"
