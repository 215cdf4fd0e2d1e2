"""Notebook tests (`pytest --nbval notebooks`): each notebook runs in a temporary folder of its own.

nbval starts one kernel a notebook; that kernel starts with MINITRAIN_LAB_OUT and MINITRAIN_LAB_SCRATCH
naming the notebook's own folders, so `minitrain.lab.reporting.runs.output_dir()` and `scratch_dir()` point there,
never into the committed artifacts in experiments/35-ddp-cpu/: `make test` leaves `git status` clean.
The output folder starts as a copy of the committed artifacts, as a fresh clone has them: a notebook that
reads the committed runs finds them, and one that runs live (04) writes over its own copy only, so the
notebooks pass in any order and on any pytest worker.
"""

import os
import shutil
import tempfile
from pathlib import Path

import nbval.kernel
import nbval.plugin

from minitrain.lab.running.execute_notebook import SyncIPCKernelManager
from minitrain.paths import EXPERIMENT_DIR, STUDENT_EDITION

if STUDENT_EDITION:  # a TODO still blank is skipped, naming it (minitrain.lab.editions.blank_todos)
    from minitrain.lab.editions.blank_todos import pytest_runtest_makereport, pytest_runtest_setup  # noqa: F401

# nbval starts its kernels with jupyter_client's KernelManager and no way to choose the transport:
# its kernels would listen on TCP ports. The same manager on Unix sockets, as `make lab` uses.
nbval.kernel.KernelManager = SyncIPCKernelManager

_root: list[Path] = []
_start_kernel = nbval.plugin.IPyNbFile.setup


def _setup_in_own_folder(notebook: nbval.plugin.IPyNbFile) -> None:
    """nbval's setup (it starts the kernel), with the lab's folders set for that kernel alone."""
    if not _root:
        _root.append(Path(tempfile.mkdtemp(prefix="minitrain-nbval-")))
    folder = Path(tempfile.mkdtemp(prefix=f"{Path(str(notebook.fspath)).stem}-", dir=_root[0]))
    shutil.copytree(EXPERIMENT_DIR, folder / "out")
    own = {"MINITRAIN_LAB_OUT": str(folder / "out"), "MINITRAIN_LAB_SCRATCH": str(folder / "scratch")}
    before = {name: os.environ.get(name) for name in own}
    os.environ.update(own)  # the kernel inherits the environment when it starts, here
    try:
        _start_kernel(notebook)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


nbval.plugin.IPyNbFile.setup = _setup_in_own_folder


def pytest_unconfigure(config):
    for root in _root:
        shutil.rmtree(root, ignore_errors=True)
