"""The installed environment has the CPU build of the pinned torch and no nvidia-* package."""

import importlib.metadata
import re
from pathlib import Path

import torch
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def makefile_torch_version() -> str:
    return re.search(r"^TORCH := torch==(\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def test_torch_is_the_pinned_version():
    assert Version(torch.__version__).public == makefile_torch_version() == "2.13.0"


def test_torch_is_a_cpu_build():
    assert torch.version.cuda is None
    assert not torch.backends.cuda.is_built()


def test_no_nvidia_distribution_is_installed():
    names = {d.metadata["Name"] or "" for d in importlib.metadata.distributions()}
    assert [n for n in names if n.lower().startswith("nvidia")] == []
