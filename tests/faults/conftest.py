import subprocess

import pytest

from minitrain.launch import stop_process_tree


@pytest.fixture
def reap():
    """Kill whatever a test's runs leave behind, so one failure cannot orphan workers."""
    procs: list[subprocess.Popen] = []
    yield procs.append
    for p in procs:
        if p.poll() is None:
            stop_process_tree(p, grace=1)
