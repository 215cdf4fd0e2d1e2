"""Which sockets a notebook kernel listens on, read from the operating system while it runs: the
kernels of `make lab` (minitrain.lab.running.execute_notebook) and of `make notebook` (JupyterLab, the Makefile's own
command line) talk over Unix sockets in Jupyter's private runtime folder, not TCP ports.

One TCP port stays, on 127.0.0.1: ipykernel's IOPub pipe, where forked subprocesses send their
output. ipykernel opens it whatever the transport (IOPubThread(pipe=True) in its kernel app), and
drops every message that lacks a random 16-byte key. papermill's own kernel manager, for
comparison, opens six TCP ports and the warning "Kernel is running over TCP without encryption".
"""

import json
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import nbformat
import papermill
import psutil
import pytest

from minitrain.lab.running.execute_notebook import KERNEL, execute
from minitrain.launch import free_port, listening_sockets, stop_process_tree

ROOT = Path(__file__).resolve().parents[2]
TCP_WARNING = "Kernel is running over TCP without encryption"
CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")

# the cell reports its kernel's pid and IOPub pipe port, then holds the kernel until the test is done
CELL = """\
import json, os, pathlib, time
kernel = get_ipython().kernel
pathlib.Path({report!r}).write_text(json.dumps({{"pid": os.getpid(), "pipe_port": kernel.iopub_thread._pipe_port}}))
deadline = time.monotonic() + 60
while not pathlib.Path({done!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.1)
print("kernel", os.getpid(), "done")
"""


@pytest.fixture
def runtime_dir(monkeypatch):
    """Jupyter's runtime folder (connection files, IPC sockets), not there yet, in a short temporary
    path: a Unix socket's path holds at most 107 bytes (103 on macOS), and pytest's tmp_path plus
    "kernel-UUID-ipc-1" can be longer (then the kernel cannot bind and JupyterLab answers 500)."""
    parent = Path(tempfile.mkdtemp(prefix="jrt-"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(parent / "rt"))
    yield parent / "rt"
    shutil.rmtree(parent, ignore_errors=True)


def holding_notebook(folder: Path) -> tuple[Path, Path, Path]:
    """A one-cell notebook that reports its kernel and waits; its report and 'done' files."""
    report, done = folder / "kernel.json", folder / "done"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL.format(report=str(report), done=str(done)))]
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    path = folder / "hold.ipynb"
    nbformat.write(nb, path)
    return path, report, done


def wait_for_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        if time.monotonic() > deadline:
            pytest.fail(f"{path} never appeared")
        time.sleep(0.1)
    return path.read_text()


def kernel_sockets(pid: int) -> tuple[list, set[str], dict]:
    """The kernel's TCP listeners, the Unix socket paths it holds, and its connection file."""
    process = psutil.Process(pid)
    connection_file = process.cmdline()[process.cmdline().index("-f") + 1]
    unix = {c.laddr for c in process.net_connections(kind="unix") if c.laddr}
    return listening_sockets([pid]), unix, json.loads(Path(connection_file).read_text())


def assert_ipc_kernel(pid: int, pipe_port: int, runtime: Path) -> dict:
    """Five channels on Unix sockets in `runtime`; one TCP listener, the IOPub pipe on 127.0.0.1."""
    listeners, unix, info = kernel_sockets(pid)
    assert info["transport"] == "ipc", info
    assert Path(info["ip"]).parent == runtime, info["ip"]
    assert {f"{info['ip']}-{info[name]}" for name in CHANNELS} <= unix, (info, unix)
    assert [(l.address, l.port) for l in listeners] == [("127.0.0.1", pipe_port)], listeners
    assert stat.S_IMODE(runtime.stat().st_mode) & 0o077 == 0  # the folder guards the sockets
    return info


def run_in_thread(target, *args) -> tuple[threading.Thread, list]:
    errors: list = []

    def run() -> None:
        try:
            target(*args)
        except BaseException as e:  # reported by the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no IPC transport: kernels stay on TCP there")
def test_make_lab_kernels_listen_on_unix_sockets(tmp_path, runtime_dir, capfd):
    src, report, done = holding_notebook(tmp_path)
    thread, errors = run_in_thread(execute, src, tmp_path / "executed.ipynb")
    try:
        kernel = json.loads(wait_for_file(report))
        info = assert_ipc_kernel(kernel["pid"], kernel["pipe_port"], runtime_dir)
    finally:
        done.touch()
        thread.join(60)
    assert not errors, errors
    assert TCP_WARNING not in "".join(capfd.readouterr())  # the kernel's stderr is this process's
    assert not list(runtime_dir.glob(Path(info["ip"]).name + "*"))  # its sockets are gone with it


def test_papermills_own_kernel_manager_for_comparison_listens_on_tcp(tmp_path, runtime_dir, capfd):
    """The control: the same notebook under papermill's default kernel manager, six TCP ports and
    the warning, so the absence of both above means something."""
    src, report, done = holding_notebook(tmp_path)
    thread, errors = run_in_thread(lambda: papermill.execute_notebook(
        str(src), str(tmp_path / "executed.ipynb"), kernel_name=KERNEL, progress_bar=False))
    try:
        kernel = json.loads(wait_for_file(report))
        listeners, _, info = kernel_sockets(kernel["pid"])
    finally:
        done.touch()
        thread.join(60)
    assert not errors, errors
    assert info["transport"] == "tcp"
    assert sorted(l.port for l in listeners) == sorted([kernel["pipe_port"], *(info[n] for n in CHANNELS)])
    assert {l.address for l in listeners} == {"127.0.0.1"}
    assert TCP_WARNING in "".join(capfd.readouterr())


def command_line(proc: psutil.Process) -> list[str]:
    """`proc`'s command line; none for a process that ended (or became a zombie) since it was listed."""
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
        return []


def make_notebook_command() -> list[str]:
    """The Makefile's `notebook` recipe, with $(VENV) resolved: what `make notebook` runs."""
    recipe = re.search(r"^notebook:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    words = shlex.split(recipe.replace("$(VENV)", ".venv"))
    assert words[:2] == [".venv/bin/jupyter", "lab"], recipe
    return [str(Path(sys.executable).with_name("jupyter")), *words[1:]]


def api(base: str, token: str, path: str, method: str = "GET", body: dict | None = None) -> dict:
    request = urllib.request.Request(f"{base}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else {}


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no IPC transport: kernels stay on TCP there")
def test_make_notebook_kernels_listen_on_unix_sockets(tmp_path, runtime_dir):
    port = free_port()
    token = secrets.token_hex(16)
    command = [*make_notebook_command(), "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}",
               *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])]
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
                                   "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                api(base, token, "/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "server.log").read_text())
                time.sleep(0.5)
        kernel_id = api(base, token, "/api/kernels", "POST", {"name": KERNEL})["id"]
        while True:  # until the kernel process holds its five channels
            kernel = next((p for p in psutil.Process(server.pid).children(recursive=True)
                           if any(kernel_id in word for word in command_line(p))), None)
            if kernel is not None:
                listeners, unix, info = kernel_sockets(kernel.pid)
                channels = {f"{info['ip']}-{info[name]}" for name in CHANNELS}
                if channels <= unix and listeners:
                    break
            assert time.monotonic() < deadline, "the kernel did not start"
            time.sleep(0.2)
        assert info["transport"] == "ipc"
        assert info["ip"] == str(runtime_dir / f"kernel-{kernel_id}-ipc")  # its own path, per kernel
        assert len(listeners) == 1 and listeners[0].address == "127.0.0.1", listeners  # the IOPub pipe
        server_listeners = listening_sockets([server.pid])
        assert {l.address for l in server_listeners} <= {"127.0.0.1", "::1"}, server_listeners
        api(base, token, f"/api/kernels/{kernel_id}", "DELETE")
    finally:
        stop_process_tree(server, grace=10)
        log.close()
    assert TCP_WARNING not in (tmp_path / "server.log").read_text()
