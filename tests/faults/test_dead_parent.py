"""A parent killed outright (SIGKILL, out of memory, a Jupyter kernel that dies hard) runs no
cleanup: the run's own processes must notice and end within seconds, with real processes."""

import os
import signal
import subprocess
import sys
import time

import pytest

from harness import HERE, NEW_INTERPRETERS, WORKERS, launch, wait_for_line, wait_gone
from minitrain.launch import alive, process_tree

GONE_WITHIN = 10  # seconds from the SIGKILL until no process of the run is left
SERVE = ("serve", "120")  # workers that hold their group open, printing nothing, far longer than that


def python_parent(code: str) -> subprocess.Popen:
    """A small Python parent running `code` in its own session (it can import workers.py)."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": path})


def wait_for_both_ranks(proc: subprocess.Popen) -> None:
    """Read the run's output until both workers have joined the group and said so."""
    if "".join(wait_for_line(proc, "ready")).count("ready") < 2:  # lines may interleave
        wait_for_line(proc, "ready")


@pytest.fixture
def kill_parent():
    """Once both ranks are ready, SIGKILL the run's parent and check that every process of its
    tree (taken before) is gone within GONE_WITHIN seconds. Afterwards SIGKILL any survivor, so a
    failure cannot leave workers behind."""
    trees: list[list[int]] = []

    def kill(parent: subprocess.Popen, who: str, processes: int) -> None:
        wait_for_both_ranks(parent)
        tree = process_tree(parent.pid)
        trees.append(tree)
        assert len(tree) >= processes, tree
        start = time.monotonic()
        parent.kill()
        parent.wait()
        survivors = wait_gone(tree, timeout=GONE_WITHIN)
        print(f"{who} killed: {len(survivors)} of {len(tree)} processes left "
              f"{time.monotonic() - start:.1f} s later")
        assert survivors == [], f"still running {GONE_WITHIN} s after {who} was killed: {survivors}"

    yield kill
    for pid in alive([pid for tree in trees for pid in tree]):
        os.kill(pid, signal.SIGKILL)


def test_killing_the_launcher_ends_its_workers(kill_parent):
    proc = launch("--nproc-per-node=2", str(WORKERS), *SERVE, env=NEW_INTERPRETERS)
    kill_parent(proc, "the launcher", processes=3)  # the launcher and both workers
    out = proc.stdout.read()  # the workers wrote into the launcher's pipe; all of them have exited
    assert out.count(f"its parent, pid {proc.pid}, is gone") == 2, out


def test_killing_the_spawn_parent_ends_its_workers(kill_parent):
    """On Linux, torch's mp.spawn asks for SIGINT on its parent's death (PR_SET_PDEATHSIG); that does
    nothing on macOS, nor where SIGINT is ignored, as for a background job of a shell script
    (`python train.py --launcher spawn &`): the parent here ignores SIGINT, so its workers do too."""
    proc = python_parent("import signal, workers\nfrom minitrain.launch import spawn_workers\n"
                         "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                         f"spawn_workers(workers.main, 2, *{SERVE!r})")
    kill_parent(proc, "the spawn parent", processes=3)  # the parent and both workers


def test_killing_the_process_that_streams_a_run_ends_the_launcher_and_workers(kill_parent):
    proc = python_parent("from minitrain.launch import run_streaming, torchrun_command\n"
                         f"run_streaming(torchrun_command({str(WORKERS)!r}, 2, *{SERVE!r}))")
    kill_parent(proc, "the streaming process", processes=4)  # it, the launcher, both workers
