"""Is the machine quiet enough to measure? Other programs' CPU use before measured runs: `make lab`
waits a little for it to calm down, `make measurements` stops; both go on with a warning given --busy-ok."""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

IDLE_LOAD = 0.8  # CPUs' worth of other programs' work below which the machine counts as idle
SAMPLE_S = 2.0  # the sample of everyone's CPU use
WAIT_S = 90.0  # the longest make lab waits for a busy machine: a finished job's load average decays in about a minute
POLL_S = 5.0
NEXT_STEP = ("stop the other programs (top, or the Activity Monitor, lists them) and run make lab again, or measure "
             "anyway: make lab ARGS=--busy-ok (repeats that disagree are then marked disturbed)")


class MachineBusy(RuntimeError):
    """The machine stayed busy; the message says how busy (NEXT_STEP says what to do)."""


@dataclass(frozen=True)
class Load:
    """How busy the machine is, two ways."""

    average_1min: float  # the 1-minute load average (everyone's runnable processes)
    others_now: float  # CPUs' worth of work by other programs over the last SAMPLE_S, this process tree's left out

    @property
    def busy(self) -> bool:
        """Busy when both say so: the average lingers for a minute after a job ends, a sample can catch a burst."""
        return min(self.average_1min, self.others_now) > IDLE_LOAD

    def __str__(self) -> str:
        return (f"load average {self.average_1min:.1f} over the last minute, other programs using "
                f"{self.others_now:.1f} CPUs over the last {SAMPLE_S:g} s; busy only when both exceed {IDLE_LOAD}")


def _busy_seconds() -> float:
    """CPU seconds every CPU has spent busy since boot (neither idle nor waiting for a disk)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _own_seconds() -> dict[int, float]:
    """CPU seconds of this process and its descendants, by pid: the lab's own work is not another program's."""
    me = psutil.Process()
    found = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            found[proc.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return found


def measure_load(sample_s: float = SAMPLE_S) -> Load:
    """The load average now and other programs' CPU use over a `sample_s` sample."""
    busy, own, start = _busy_seconds(), _own_seconds(), time.monotonic()
    time.sleep(sample_s)
    own_after = _own_seconds()
    mine = sum(own_after[pid] - own.get(pid, 0.0) for pid in own_after)
    others = max(0.0, _busy_seconds() - busy - mine) / (time.monotonic() - start)
    average = psutil.getloadavg()[0]  # emulated where the OS has none (Windows)
    return Load(average if math.isfinite(average) else 0.0, others)


def busy_sentence(load: Load) -> str:
    """'the machine is busy (...)': why measuring now would measure the other programs too."""
    return f"the machine is busy ({load}): the numbers would measure the other programs too"


def _say(text: str) -> None:
    print(text, flush=True)


def wait_until_quiet(busy_ok: bool, wait_s: float = WAIT_S, echo: Callable[[str], None] = _say) -> Load:
    """Before measured runs: say how busy the machine is and what happens next. With `busy_ok` go on with a
    warning; else wait up to `wait_s` for it to calm down, then MachineBusy naming the next step."""
    load = measure_load()
    if not load.busy:
        echo(f"the machine is quiet ({load}): measuring")
        return load
    if busy_ok:
        echo(f"WARNING: {busy_sentence(load)}; measuring anyway (--busy-ok): repeats that disagree are marked disturbed")
        return load
    echo(f"{busy_sentence(load)}; waiting up to {wait_s:.0f} s for it to calm down (--busy-ok measures at once)")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        load = measure_load()
        if not load.busy:
            echo(f"quiet now ({load}): measuring")
            return load
    raise MachineBusy(f"{busy_sentence(load)}, still after {wait_s:.0f} s of waiting")
