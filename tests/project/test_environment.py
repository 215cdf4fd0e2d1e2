"""pyproject.toml is the single source of dependencies; environment.yml and the Makefile agree."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ENVIRONMENT = yaml.safe_load((ROOT / "environment.yml").read_text())


def pip_section() -> list[str]:
    return next(d["pip"] for d in ENVIRONMENT["dependencies"] if isinstance(d, dict))


def torch_requirement() -> Requirement:
    return next(Requirement(d) for d in PYPROJECT["project"]["dependencies"] if d.startswith("torch"))


def test_environment_installs_the_project_with_dev_extra_from_pyproject():
    assert "-e .[dev]" in pip_section()
    names = [d for d in ENVIRONMENT["dependencies"] if isinstance(d, str)]
    # conda brings only Python and pip; every library comes from pyproject.toml
    assert sorted(n.split("=")[0] for n in names) == ["pip", "python"]
    assert ENVIRONMENT["channels"] == ["conda-forge"]


def torch_pin_for(sys_platform: str) -> str:
    """The one torch line of environment.yml's pip section that applies on sys_platform."""
    pins = [Requirement(line) for line in pip_section() if line.startswith("torch")]
    applying = [r for r in pins if r.marker is None or r.marker.evaluate({"sys_platform": sys_platform})]
    assert len(applying) == 1, (sys_platform, applying)
    return str(applying[0].specifier)


def test_pinned_torch_is_the_same_everywhere_and_admitted_by_pyproject():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH := torch==2.13.0" in makefile
    # the Makefile installs its pin through the script that picks the CPU build per platform
    assert "$(PY) tools/install_torch_cpu.py $(TORCH)" in makefile
    # environment.yml: the CPU index's +cpu build on Linux, the (CPU-only) 2.13.0 on macOS and Windows
    assert torch_pin_for("linux") == "==2.13.0+cpu"
    assert torch_pin_for("darwin") == "==2.13.0"
    assert torch_pin_for("win32") == "==2.13.0"
    assert torch_requirement().specifier.contains(Version("2.13.0"))
    assert torch_requirement().specifier.contains(Version("2.13.0+cpu"))


def test_cpu_index_is_the_same_in_environment_and_install_script():
    script = (ROOT / "tools" / "install_torch_cpu.py").read_text()
    assert 'CPU_INDEX = "https://download.pytorch.org/whl/cpu"' in script
    # --extra-index-url, not --index-url: the project's other dependencies come from PyPI
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip_section()
    assert not any(line.startswith("--index-url") for line in pip_section())


def test_python_version_is_admitted_by_pyproject():
    python = next(d for d in ENVIRONMENT["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(python.split("=")[1])


def test_every_required_package_is_declared():
    declared = {Requirement(d).name for d in PYPROJECT["project"]["dependencies"]}
    assert {"torch", "numpy", "matplotlib", "jupyterlab", "ipykernel", "nbclient", "nbformat",
            "papermill"} <= declared
    dev = {Requirement(d).name for d in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    assert {"pytest", "nbval", "pyyaml", "packaging"} <= dev
