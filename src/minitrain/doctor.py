"""Is this machine ready for the lab? One row a check, OK, WARN or FAIL, what was found and the fix.

    python -m minitrain.doctor      # exit status 1 when a row says FAIL

The checks: the torch build (CPU, gloo), usable cores and threads, whether the hostname resolves
(gloo and plain torchrun look it up; on macOS an unresolvable one ends in "The IPv6 network
addresses of (NAME.local, PORT) cannot be retrieved"), which interface is loopback, whether a port
on 127.0.0.1 can be bound, whether Jupyter's kernels can use Unix sockets, and which launcher this
operating system should use.
"""

import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from minitrain.cli import SettingError, master_port
from minitrain.gloo_setup import loopback_interface
from minitrain.launch import preferred_launcher
from minitrain.provenance import usable_cores

OK, WARN, FAIL = "OK", "WARN", "FAIL"
OS_NAMES = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}
REINSTALL = "reinstall the CPU build: rm -rf .venv && make venv (tools/install_torch_cpu.py picks it)"
HOSTNAME_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN or FAIL
    found: str
    fix: str = ""


def operating_system() -> str:
    """'Linux', 'macOS' or 'Windows' (from sys.platform), else sys.platform itself."""
    return OS_NAMES.get(sys.platform, sys.platform)


def check_torch() -> Check:
    """A CPU build of torch with torch.distributed and its gloo backend."""
    version = torch.__version__
    if not dist.is_available():
        return Check("torch build", FAIL, f"torch {version} has no torch.distributed", REINSTALL)
    if not dist.is_gloo_available():
        return Check("torch build", FAIL, f"torch {version} has no gloo backend", REINSTALL)
    accelerator = torch.version.cuda or torch.version.hip
    if accelerator:
        return Check("torch build", WARN, f"torch {version}, a GPU build ({accelerator}), gloo available",
                     "it runs the lab on the CPU all the same, but is gigabytes larger; " + REINSTALL)
    return Check("torch build", OK, f"torch {version}, a CPU build, gloo available")


def check_cores() -> Check:
    """Two ranks need two cores to run side by side."""
    cores, threads = usable_cores(), torch.get_num_threads()
    found = (f"{cores} usable core{'s' if cores != 1 else ''}; torch uses {threads} thread{'s' if threads != 1 else ''} "
             f"in this process (OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS', 'not set')})")
    if cores < 2:
        return Check("cores and threads", WARN, found,
                     "the two ranks take turns on one core: the lab runs, but 2 processes are slower than 1")
    return Check("cores and threads", OK, found)


def check_hostname(timeout: float = HOSTNAME_TIMEOUT_S) -> Check:
    """Does this machine's name resolve, and quickly? The lab's launchers use 127.0.0.1 and do not
    need it; plain torchrun and gloo without GLOO_SOCKET_IFNAME do."""
    name = socket.gethostname()
    result: dict = {}

    def resolve() -> None:
        try:
            result["addresses"] = sorted({info[4][0] for info in socket.getaddrinfo(name, None)})
        except OSError as e:
            result["error"] = e

    start = time.monotonic()
    worker = threading.Thread(target=resolve, daemon=True)  # a lookup can hang for minutes on macOS
    worker.start()
    worker.join(timeout)
    seconds = time.monotonic() - start
    hosts = r"C:\Windows\System32\drivers\etc\hosts" if sys.platform == "win32" else "/etc/hosts"
    fix = f"add the line `127.0.0.1 {name}` to {hosts}"
    symptom = ("plain torchrun and gloo without GLOO_SOCKET_IFNAME fail"
               + (" with \"The IPv6 network addresses of (NAME.local, PORT) cannot be retrieved\""
                  if sys.platform == "darwin" else "")
               + " (the lab's launchers use 127.0.0.1 and run)")
    if "addresses" in result:
        found = f"{name} resolves to {', '.join(result['addresses'])} in {seconds:.1f} s"
        if seconds > 2:
            return Check("hostname", WARN, found, f"a slow lookup slows every start: {fix}")
        return Check("hostname", OK, found)
    if "error" in result:
        return Check("hostname", WARN, f"{name} does not resolve ({result['error']})", f"{symptom}: {fix}")
    return Check("hostname", WARN, f"{name} did not resolve within {timeout:.0f} s", f"{symptom}: {fix}")


def check_loopback() -> Check:
    """The interface holding 127.0.0.1 ("lo" on Linux, "lo0" on macOS), where the lab keeps gloo."""
    name = loopback_interface()
    holds = any(a.family == socket.AF_INET and a.address == "127.0.0.1"
                for a in psutil.net_if_addrs().get(name, []))
    if not holds:
        return Check("loopback interface", FAIL, "no interface holds 127.0.0.1",
                     "bring loopback up: sudo ip link set lo up (Linux), sudo ifconfig lo0 up (macOS)")
    chosen = os.environ.get("GLOO_SOCKET_IFNAME")
    if chosen and chosen != name:
        return Check("loopback interface", WARN, f"{name} holds 127.0.0.1, but GLOO_SOCKET_IFNAME={chosen}",
                     f"gloo will talk over {chosen}: unset GLOO_SOCKET_IFNAME (the lab sets it to {name})")
    if sys.platform == "win32":
        return Check("loopback interface", WARN, f"{name} holds 127.0.0.1; gloo on Windows picks its interface "
                     "from the hostname (the lab leaves GLOO_SOCKET_IFNAME unset there)",
                     "gloo's sockets may listen on your network address: use a trusted network, or WSL")
    return Check("loopback interface", OK, f"{name} holds 127.0.0.1: the lab keeps gloo on it (GLOO_SOCKET_IFNAME)")


def check_port() -> Check:
    """A port on 127.0.0.1 can be bound: $MASTER_PORT when set, else any free one."""
    try:
        port = master_port()
    except SettingError as e:
        return Check("port on 127.0.0.1", FAIL, str(e).split(":")[0], "unset MASTER_PORT to let the lab pick a free port")
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            bound = s.getsockname()[1]
    except OSError as e:
        if port:
            return Check("port on 127.0.0.1", FAIL, f"MASTER_PORT={port} is taken on 127.0.0.1 ({e.strerror})",
                         "unset MASTER_PORT to let the lab pick a free port, or choose another one")
        return Check("port on 127.0.0.1", FAIL, f"no port on 127.0.0.1 can be bound ({e})",
                     "a firewall or sandbox blocks loopback sockets: allow Python to listen on 127.0.0.1")
    if port:
        return Check("port on 127.0.0.1", OK, f"MASTER_PORT={port} is free on 127.0.0.1")
    return Check("port on 127.0.0.1", OK, f"port {bound} was free (each run binds a free port of its own)")


def check_kernel_sockets() -> Check:
    """`make lab` and `make notebook` start kernels on Unix sockets in Jupyter's runtime folder,
    named like kernel-UUID-ipc-5 there: the longest such path must fit a Unix socket's."""
    if sys.platform == "win32":
        return Check("kernel sockets", OK, "TCP ports on 127.0.0.1 (Windows has no IPC transport)")
    import zmq
    from jupyter_core.paths import jupyter_runtime_dir

    runtime = Path(jupyter_runtime_dir())
    longest = len(os.fsencode(runtime / f"kernel-{uuid.uuid4()}-ipc-5"))
    limit = getattr(zmq, "IPC_PATH_MAX_LEN", 103)  # sun_path less its NUL: 107 on Linux, 103 on macOS
    shown = f"~/{runtime.relative_to(Path.home())}" if runtime.is_relative_to(Path.home()) else str(runtime)
    found = f"Unix sockets in {shown} (the longest path {longest} bytes of at most {limit})"
    if longest > limit:
        return Check("kernel sockets", WARN, found, "kernels cannot bind there (JupyterLab answers 500): set "
                     "JUPYTER_RUNTIME_DIR to a shorter private folder, e.g. ~/.jrt")
    return Check("kernel sockets", OK, found)


def check_launcher() -> Check:
    """The lab's torchrun on Linux and macOS; the spawn launcher with libuv off on Windows."""
    system = operating_system()
    if preferred_launcher() == "spawn":
        return Check("launcher", WARN, f"{system}: the spawn launcher with libuv off, "
                     "python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2; torchrun's rendezvous "
                     "asks for libuv, which PyTorch's Windows wheels lack (pytorch/pytorch#139990, #175316)",
                     "the notebooks' live runs use torchrun: run them in WSL, or the spawn command in a terminal")
    found = (f"{system}: torchrun, python -m minitrain.launch --nproc-per-node=2 SCRIPT (its stores on 127.0.0.1); "
             "the spawn launcher works too")
    if system not in ("Linux", "macOS"):
        return Check("launcher", WARN, found, f"the lab has not been tried on {system}")
    return Check("launcher", OK, found)


CHECKS = (check_torch, check_cores, check_hostname, check_loopback, check_port, check_kernel_sockets,
          check_launcher)


def run_checks() -> list[Check]:
    """Every check, in the order a reader fixes things."""
    return [check() for check in CHECKS]


def format_checks(checks: list[Check]) -> str:
    """One line a check (status, name, what was found), the fix indented under a WARN or FAIL row."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.found}")
        if c.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    return "\n".join(lines)


def ready(checks: list[Check]) -> str:
    """One line saying the machine can run the lab; raises, naming the checks to fix, when it cannot."""
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        raise RuntimeError(f"fix these checks first (the table above says how): {', '.join(failed)}")
    return f"all {len(checks)} checks OK or WARN ({', '.join(c.name for c in checks)}): this machine can run the lab"


def main() -> int:
    checks = run_checks()
    print(format_checks(checks))
    try:
        print(ready(checks))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
