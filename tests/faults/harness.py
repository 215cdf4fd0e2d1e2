"""What the fault tests share: the paths, the runs kept on new interpreters, and starting and watching the lab's
launcher (a module of its own, not conftest.py: `from conftest import` finds whichever conftest pytest put on
sys.path first, another folder's when one call collects tests/faults with another folder)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minitrain.launch import alive
from minitrain.launch.torchrun import WARM

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRAIN = ROOT / "experiments" / "35-ddp-cpu" / "train.py"
WORKERS = HERE / "workers.py"
# Under the tests the lab's torchrun forks its workers from itself, warm ($MINITRAIN_WARM_RANKS=1, tests/conftest.py);
# the runs that check how a worker's end is reported (torchrun's agent reports every worker that failed; torch's
# multiprocessing the first only) or what a worker does when the launcher dies start each worker as a new
# interpreter, as a learner's run does:
NEW_INTERPRETERS = {WARM: "0"}


def launch(*args: str, env: dict | None = None) -> subprocess.Popen:
    """Start `python -m minitrain.launch ARGS` (the lab's default launcher) in its own session."""
    return subprocess.Popen([sys.executable, "-m", "minitrain.launch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **(env or {})})


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> list[str]:
    """Read the run's output until a line holds `needle`; fail if it ends or times out first."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    proc.kill()
    pytest.fail(f"never saw {needle!r}:\n{''.join(lines)}")


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    """Wait until none of `pids` runs any more; return the survivors if any."""
    deadline = time.monotonic() + timeout
    while (survivors := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return survivors
