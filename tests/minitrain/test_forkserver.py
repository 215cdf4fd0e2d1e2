"""The grading forkserver on real processes: a child's output, exit status and its own `random`; a child
past its timeout stopped with its whole tree; and the children killed when the client goes away."""

import os
import sys
import time

import psutil
import pytest

from minitrain.lab.grading.forkserver import Forkserver

CHILD = '''
import random, subprocess, sys, time
print("random", random.random(), flush=True)
if "--sleep" in sys.argv:
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    print("sleeping; its process", grandchild.pid, flush=True)
    time.sleep(120)
sys.exit(3)
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The shared server's PYTHONPATH: the modules its children run."""
    return tmp_path_factory.mktemp("forkserver")


@pytest.fixture(scope="module")
def server(folder):
    """One server for the tests that leave it as they found it (its start imports torch: seconds)."""
    (folder / "child.py").write_text(CHILD)
    server = Forkserver({"PYTHONPATH": str(folder)}, cwd=folder)
    yield server
    server.close()


def descendants(pid: int) -> list[psutil.Process]:
    """The server's descendants but the two it starts for the graders' ranks, once (multiprocessing's forkserver and
    its resource tracker)."""
    return [p for p in psutil.Process(pid).children(recursive=True)
            if not any(part.startswith("from multiprocessing.") for part in p.cmdline())]


def test_the_ranks_a_child_starts_fork_from_the_servers_one_forkserver_and_print_to_the_childs_output(server, folder):
    """The ranks of two children (spawn_workers, fast_start_method) come from one warm process the server started,
    their lines in their own child's output."""
    (folder / "ranks.py").write_text(RANKS)
    outputs: list[list[str]] = [[], []]
    assert [server.run("ranks", [], 120, lines.append) for lines in outputs] == [0, 0]
    [forkserver] = [p.pid for p in psutil.Process(server.proc.pid).children()
                    if "multiprocessing.forkserver" in " ".join(p.cmdline())]
    for lines in outputs:
        parents = [line.split()[-1] for line in lines if line.startswith("rank ")]
        assert parents == [str(forkserver)] * 2, lines


RANKS = '''
import os
from minitrain.launch import fast_start_method, spawn_workers

def rank():
    # one write of the whole line: the two ranks write to the child's output at the same moment
    os.write(1, f"rank {os.environ['RANK']} parent {os.getppid()}\\n".encode())

if __name__ == "__main__":
    spawn_workers(rank, 2, start_method=fast_start_method(), timeout_s=60)
'''


def test_a_child_streams_its_lines_and_returns_its_status_with_a_random_state_of_its_own(server):
    outputs: list[list[str]] = [[], []]
    statuses = [server.run("child", [], 60, lines.append) for lines in outputs]
    assert statuses == [3, 3]
    draws = [next(line for line in lines if line.startswith("random ")) for lines in outputs]
    assert draws[0] != draws[1]  # reseeded in each child, as two new interpreters would be


def alive(pid: int) -> bool:
    """`pid` still runs 5 s from now (a killed process may take a moment to go); orphans count too."""
    try:
        return psutil.wait_procs([psutil.Process(pid)], timeout=5)[1] != []
    except psutil.NoSuchProcess:
        return False


def test_a_child_past_its_timeout_is_stopped_with_its_whole_tree(server):
    lines: list[str] = []
    with pytest.raises(TimeoutError, match="no result within 3 s"):
        server.run("child", ["--sleep"], 3, lines.append)
    [grandchild] = [int(line.split()[-1]) for line in lines if line.startswith("sleeping")]
    assert not alive(grandchild)  # started in a session of its own: gone even so, not left to init
    assert psutil.wait_procs(descendants(server.proc.pid), timeout=5)[1] == []


def test_when_the_client_goes_the_server_kills_its_children_and_ends(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    server = Forkserver({"PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    log = tmp_path / "out.log"
    server.proc.stdin.write(f'{{"id": 0, "module": "child", "args": ["--sleep"], "log": "{log}"}}\n'.encode())
    server.proc.stdin.flush()
    deadline = time.monotonic() + 60
    while "sleeping" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    tree = descendants(server.proc.pid)
    assert len(tree) == 2, tree  # the child and the process it started in a session of its own
    server.proc.stdin.close()  # what a client that dies does to the server's input
    assert server.proc.wait(timeout=30) == 0
    assert not any(alive(p.pid) for p in tree)
