"""Install the CPU build of torch into the Python that runs this script; standard library only.

    .venv/bin/python tools/install_torch_cpu.py torch==2.13.0

Linux: from PyTorch's CPU wheel index (CPU_INDEX), whose Linux wheels are the `+cpu` builds;
PyPI's Linux wheels (x86-64 and aarch64) are CUDA builds that pull several GB of nvidia-* wheels.
If that index cannot be reached within --timeout seconds, fall back to the torch that pip finds
as configured (e.g. a local CPU wheel through find-links), but only if pip's dry run shows that
no nvidia-* package would come with it.
macOS and Windows: plain PyPI, whose wheels there are CPU-only, behind the same dry-run guard.
Always afterwards: torch has the pinned version, no CUDA, and no nvidia-* distribution is installed.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def say(message: str) -> None:
    print(f"install_torch_cpu: {message}", flush=True)


def uses_cpu_index(system: str) -> bool:
    """True where plain PyPI would bring a CUDA build: Linux (platform.system() names)."""
    return system == "Linux"


def index_reachable(index: str, timeout: float) -> bool:
    """Any HTTP answer from the index's torch page counts; no answer within timeout does not."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError, timeouts, refused connections, bad URLs
        return False


def run_pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    return subprocess.run(command, text=True, stdout=subprocess.PIPE if capture else None)


def would_install(requirement: str) -> dict[str, str]:
    """{name: version} that `pip install requirement` would install, from pip's dry run."""
    version = run_pip("--version", capture=True).stdout.split()[1]
    if tuple(int(p) for p in version.split(".")[:2]) < (22, 2):  # --dry-run and --report
        run_pip("install", "--quiet", "pip>=22.2")
    result = run_pip("install", "--dry-run", "--quiet", "--report", "-", requirement, capture=True)
    if result.returncode != 0:
        raise SystemExit(f"install_torch_cpu: pip cannot resolve {requirement} (see above)")
    report = json.loads(result.stdout)
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in report["install"]}


def install_without_nvidia(requirement: str) -> None:
    """Install requirement as pip is configured, only if no nvidia-* package would come with it."""
    planned = would_install(requirement)
    nvidia = sorted(name for name in planned if name.lower().startswith("nvidia"))
    if nvidia:
        raise SystemExit(
            f"install_torch_cpu: refusing: {requirement} here is a CUDA build that would pull "
            f"{', '.join(nvidia)}. Make {CPU_INDEX} reachable, or give pip a local CPU wheel "
            "(e.g. PIP_FIND_LINKS), then run again.")
    torch_version = next((v for name, v in planned.items() if name.lower() == "torch"), None)
    if torch_version is None:  # already installed: checked by installed_problems()
        return
    pinned = f"torch=={torch_version}"  # exactly what the dry run vetted, e.g. 2.13.0+cpu
    say(f"installing {pinned} (no nvidia-* packages in the plan)")
    if run_pip("install", "--quiet", pinned).returncode != 0:
        raise SystemExit(f"install_torch_cpu: pip could not install {pinned}")


CHECK = """
import importlib.metadata, json, torch
print(json.dumps({
    "version": torch.__version__,
    "cuda": torch.version.cuda,
    "cuda_built": torch.backends.cuda.is_built(),
    "nvidia": sorted(d.metadata["Name"] for d in importlib.metadata.distributions()
                     if (d.metadata["Name"] or "").lower().startswith("nvidia")),
}))
"""


def installed_torch() -> dict:
    # -W ignore: before the project's install there is no numpy, and torch warns about it
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", CHECK], text=True,
                            stdout=subprocess.PIPE)
    if result.returncode != 0:
        raise SystemExit("install_torch_cpu: torch does not import after the install (see above)")
    return json.loads(result.stdout)


def installed_problems(found: dict, version: str) -> list[str]:
    problems = []
    if found["version"].split("+")[0] != version:
        problems.append(f"torch {found['version']} is installed, not {version}")
    if found["cuda"] is not None or found["cuda_built"]:
        problems.append(f"torch is a CUDA build (torch.version.cuda = {found['cuda']})")
    if found["nvidia"]:
        problems.append(f"nvidia packages are installed: {', '.join(found['nvidia'])}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requirement", help="the pin, e.g. torch==2.13.0")
    parser.add_argument("--cpu-index", default=CPU_INDEX, help="PyTorch's CPU wheel index")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the CPU index before falling back")
    args = parser.parse_args(argv)
    version = args.requirement.partition("==")[2]
    if not args.requirement.startswith("torch==") or "+" in version:
        parser.error("give the public pin, e.g. torch==2.13.0")

    installed = False
    system = platform.system()
    if uses_cpu_index(system):
        if index_reachable(args.cpu_index, args.timeout):
            say(f"installing {args.requirement} from {args.cpu_index}")
            installed = run_pip("install", "--quiet", "--index-url", args.cpu_index,
                                args.requirement).returncode == 0
            if not installed:
                say("the CPU index failed; falling back to pip's configuration")
        else:
            say(f"{args.cpu_index} not reachable within {args.timeout:g} s; "
                "falling back to pip's configuration (e.g. a local CPU wheel)")
    else:
        say(f"{system}: installing {args.requirement} from PyPI (CPU-only there)")
    if not installed:
        install_without_nvidia(args.requirement)

    problems = installed_problems(installed_torch(), version)
    if problems:
        raise SystemExit("install_torch_cpu: " + "; ".join(problems)
                         + ". Start again from a fresh venv (make clean-venv).")
    say(f"torch {version}, CPU build, no nvidia-* packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
