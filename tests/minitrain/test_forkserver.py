"""The grading forkserver on real processes: a child's output, exit status and its own `random`; children of two
trees each importing its own tree's module, in its own folder and environment; a child past its timeout stopped with
its whole tree; and the children killed when the client goes away."""

import json
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
    """A tree: the modules the children run, on their PYTHONPATH."""
    folder = tmp_path_factory.mktemp("forkserver")
    (folder / "child.py").write_text(CHILD)
    return folder


@pytest.fixture(scope="module")
def server():
    """One server for the tests that leave it as they found it (its start imports torch: seconds)."""
    server = Forkserver()
    yield server
    server.close()


def run(server: Forkserver, folder, module: str, args: list[str], timeout: float, echo, **env: str) -> int:
    """`module` of `folder` run by `server`, `folder` its PYTHONPATH and working folder."""
    return server.run(module, args, timeout, echo, {**os.environ, "PYTHONPATH": str(folder), **env}, folder)


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
    assert [run(server, folder, "ranks", [], 120, lines.append) for lines in outputs] == [0, 0]
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


def test_a_child_streams_its_lines_and_returns_its_status_with_a_random_state_of_its_own(server, folder):
    outputs: list[list[str]] = [[], []]
    statuses = [run(server, folder, "child", [], 60, lines.append) for lines in outputs]
    assert statuses == [3, 3]
    draws = [next(line for line in lines if line.startswith("random ")) for lines in outputs]
    assert draws[0] != draws[1]  # reseeded in each child, as two new interpreters would be


TREE = '''
import os, sys
import tree_module
print("tree", tree_module.NAME, "in", os.path.basename(os.getcwd()), "env", os.environ.get("WHICH"),
      "path first", sys.path[0] == os.environ["PYTHONPATH"])
'''


def test_one_server_runs_each_tree_s_own_module_in_its_folder_and_environment(server, tmp_path):
    """Two trees with a module of the same name: each child imports its own tree's, in its own folder, with its own
    environment, its PYTHONPATH first on sys.path (the server itself started without one)."""
    lines: list[str] = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tree_main.py").write_text(TREE)
        (tmp_path / name / "tree_module.py").write_text(f"NAME = {name!r}\n")
        assert run(server, tmp_path / name, "tree_main", [], 60, lines.append, WHICH=f"env-{name}") == 0
    assert lines == ["tree one in one env env-one path first True", "tree two in two env env-two path first True"]


def alive(pid: int) -> bool:
    """`pid` still runs 5 s from now (a killed process may take a moment to go); orphans count too."""
    try:
        return psutil.wait_procs([psutil.Process(pid)], timeout=5)[1] != []
    except psutil.NoSuchProcess:
        return False


def test_a_child_past_its_timeout_is_stopped_with_its_whole_tree(server, folder):
    lines: list[str] = []
    with pytest.raises(TimeoutError, match="no result within 3 s"):
        run(server, folder, "child", ["--sleep"], 3, lines.append)
    [grandchild] = [int(line.split()[-1]) for line in lines if line.startswith("sleeping")]
    assert not alive(grandchild)  # started in a session of its own: gone even so, not left to init
    assert psutil.wait_procs(descendants(server.proc.pid), timeout=5)[1] == []


def test_when_the_client_goes_the_server_kills_its_children_and_ends(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    server = Forkserver()
    log = tmp_path / "out.log"
    request = {"id": 0, "module": "child", "args": ["--sleep"], "env": {**os.environ, "PYTHONPATH": str(tmp_path)},
               "cwd": str(tmp_path), "log": str(log)}
    server.proc.stdin.write((json.dumps(request) + "\n").encode())
    server.proc.stdin.flush()
    deadline = time.monotonic() + 60
    while "sleeping" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    tree = descendants(server.proc.pid)
    assert len(tree) == 2, tree  # the child and the process it started in a session of its own
    server.proc.stdin.close()  # what a client that dies does to the server's input
    assert server.proc.wait(timeout=30) == 0
    assert not any(alive(p.pid) for p in tree)
