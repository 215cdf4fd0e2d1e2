"""Notebook tests (`pytest --nbval notebooks`) write every run into a temporary folder.

The kernels nbval starts inherit this process's environment, so `minitrain.lab.runs.output_dir()`
and `scratch_dir()` point into the temporary folder, never into the committed artifacts in
experiments/35-ddp-cpu/: `make test` leaves `git status` clean. The folder starts as a copy of
the committed artifacts, as a fresh clone has them: a notebook that reads the committed runs finds
them there, and one that runs live writes over the copy.
"""

import os
import shutil
import tempfile

import nbval.kernel

from minitrain.lab.execute import SyncIPCKernelManager
from minitrain.paths import EXPERIMENT_DIR

# nbval starts its kernels with jupyter_client's KernelManager and no way to choose the transport:
# its kernels would listen on TCP ports. The same manager on Unix sockets, as `make lab` uses.
nbval.kernel.KernelManager = SyncIPCKernelManager

_created: list[str] = []


def pytest_configure(config):
    root = tempfile.mkdtemp(prefix="minitrain-nbval-")
    _created.append(root)
    shutil.copytree(EXPERIMENT_DIR, os.path.join(root, "out"))
    os.environ["MINITRAIN_LAB_OUT"] = os.path.join(root, "out")
    os.environ["MINITRAIN_LAB_SCRATCH"] = os.path.join(root, "scratch")


def pytest_unconfigure(config):
    for root in _created:
        shutil.rmtree(root, ignore_errors=True)
