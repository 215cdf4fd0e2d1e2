"""Notebook tests (`pytest --nbval notebooks`) write every run into a temporary folder.

The kernels nbval starts inherit this process's environment, so `minitrain.lab.output_dir()` and
`scratch_dir()` point into the temporary folder, never into the committed artifacts in
experiments/35-ddp-cpu/: `make test` leaves `git status` clean.
"""

import os
import shutil
import tempfile

_created: list[str] = []


def pytest_configure(config):
    root = tempfile.mkdtemp(prefix="minitrain-nbval-")
    _created.append(root)
    os.environ["MINITRAIN_LAB_OUT"] = os.path.join(root, "out")
    os.environ["MINITRAIN_LAB_SCRATCH"] = os.path.join(root, "scratch")


def pytest_unconfigure(config):
    for root in _created:
        shutil.rmtree(root, ignore_errors=True)
