"""tools/install_torch_cpu.py: which source it uses on which platform, with pip and the network faked."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from minitrain.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("install_torch_cpu", ROOT / "tools" / "install_torch_cpu.py")
install = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(install)

CPU_TORCH = {"version": "2.13.0+cpu", "cuda": None, "cuda_built": False, "nvidia": []}
CPU_PLAN = {"torch": "2.13.0+cpu", "sympy": "1.14.0"}
CUDA_PLAN = {"torch": "2.13.0", "nvidia-cublas": "13.0", "nvidia-nccl-cu13": "2.28"}


class FakeMachine:
    """platform.system(), the CPU index's reachability and pip, recorded; nothing runs."""

    def __init__(self, monkeypatch, system, reachable=True, plan=CPU_PLAN, installed=CPU_TORCH,
                 index_install_ok=True):
        self.pip_calls, self.probed = [], []
        self.plan, self.index_install_ok = plan, index_install_ok
        monkeypatch.setattr(install.platform, "system", lambda: system)
        monkeypatch.setattr(install, "index_reachable",
                            lambda index, timeout: self.probed.append(index) or reachable)
        monkeypatch.setattr(install, "run_pip", self.run_pip)
        monkeypatch.setattr(install, "installed_torch", lambda: installed)

    def run_pip(self, *args, capture=False):
        self.pip_calls.append(args)
        if args[0] == "--version":
            return subprocess.CompletedProcess(args, 0, stdout="pip 23.2.1 from somewhere")
        if "--dry-run" in args:
            report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in self.plan.items()]}
            return subprocess.CompletedProcess(args, 0, stdout=json.dumps(report))
        ok = self.index_install_ok or "--index-url" not in args
        return subprocess.CompletedProcess(args, 0 if ok else 1)

    def installs(self):
        return [a for a in self.pip_calls if a[0] == "install" and "--dry-run" not in a]


def test_linux_installs_from_the_cpu_index(monkeypatch):
    machine = FakeMachine(monkeypatch, "Linux")
    assert install.main(["torch==2.13.0"]) == 0
    assert machine.probed == [install.CPU_INDEX] == ["https://download.pytorch.org/whl/cpu"]
    assert machine.installs() == [("install", "--quiet", "--index-url", install.CPU_INDEX, "torch==2.13.0")]


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_macos_and_windows_install_from_pypi_after_the_dry_run(monkeypatch, system):
    machine = FakeMachine(monkeypatch, system, plan={"torch": "2.13.0", "sympy": "1.14.0"},
                          installed={**CPU_TORCH, "version": "2.13.0"})
    assert install.main(["torch==2.13.0"]) == 0
    assert machine.probed == []
    assert not any("--index-url" in a for a in machine.pip_calls)
    assert any("--dry-run" in a for a in machine.pip_calls)
    assert machine.installs() == [("install", "--quiet", "torch==2.13.0")]


def test_linux_without_the_index_falls_back_to_the_local_cpu_wheel(monkeypatch):
    machine = FakeMachine(monkeypatch, "Linux", reachable=False)
    assert install.main(["torch==2.13.0"]) == 0
    # installs exactly the version the dry run vetted
    assert machine.installs() == [("install", "--quiet", "torch==2.13.0+cpu")]


def test_linux_falls_back_when_the_index_install_fails(monkeypatch):
    machine = FakeMachine(monkeypatch, "Linux", index_install_ok=False)
    assert install.main(["torch==2.13.0"]) == 0
    assert machine.installs()[-1] == ("install", "--quiet", "torch==2.13.0+cpu")


def test_fallback_refuses_a_plan_with_nvidia_packages(monkeypatch):
    machine = FakeMachine(monkeypatch, "Linux", reachable=False, plan=CUDA_PLAN)
    with pytest.raises(SystemExit, match="nvidia-cublas, nvidia-nccl-cu13"):
        install.main(["torch==2.13.0"])
    assert machine.installs() == []


def test_old_pip_is_upgraded_before_the_dry_run(monkeypatch):
    machine = FakeMachine(monkeypatch, "Darwin")
    original = machine.run_pip

    def old_pip(*args, capture=False):
        if args[0] == "--version":
            machine.pip_calls.append(args)
            return subprocess.CompletedProcess(args, 0, stdout="pip 22.0.2 from somewhere")
        return original(*args, capture=capture)

    monkeypatch.setattr(install, "run_pip", old_pip)
    install.main(["torch==2.13.0"])
    assert machine.installs()[0] == ("install", "--quiet", "pip>=22.2")


@pytest.mark.parametrize("found, problem", [
    ({**CPU_TORCH, "version": "2.12.0+cpu"}, "not 2.13.0"),
    ({**CPU_TORCH, "version": "2.13.0+cu130", "cuda": "13.0", "cuda_built": True}, "CUDA build"),
    ({**CPU_TORCH, "nvidia": ["nvidia-nccl-cu13"]}, "nvidia packages are installed"),
])
def test_the_check_after_the_install_fails_on_a_wrong_torch(monkeypatch, found, problem):
    FakeMachine(monkeypatch, "Linux", installed=found)
    with pytest.raises(SystemExit, match=problem):
        install.main(["torch==2.13.0"])


def test_the_pin_must_be_public():
    with pytest.raises(SystemExit):
        install.main(["torch==2.13.0+cpu"])


def test_an_unreachable_index_is_reported_quickly():
    # a closed local port: refused at once, no network involved
    assert install.index_reachable(f"http://127.0.0.1:{free_port()}", timeout=2) is False
