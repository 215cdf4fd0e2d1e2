"""What the lab does per operating system: the launcher it picks, libuv off on Windows, the loopback
interface's name, and the machine doctor's rows. The OS is faked (sys.platform, socket and psutil
answers) only to choose a branch; stores and processes are real.

The Windows path (spawn, TCPStores without libuv) runs here for real on Linux with USE_LIBUV=0, the
setting Windows gets by default; it has not been run on Windows itself."""

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import namedtuple
from pathlib import Path

import psutil
import pytest
import torch

from minitrain import doctor
from minitrain.cli import SettingError, collective_timeout_s, master_port
from minitrain.gloo_setup import loopback_interface, use_libuv
from minitrain.lab.notebooks.show import run_parameters_problem
from minitrain.launch import (TorchrunUnavailable, listening_sockets, loopback_store, main, preferred_launcher,
                              process_tree, stop_process_tree, torchrun_command)
from minitrain.launch.torchrun import ON_WINDOWS

HERE = Path(__file__).resolve().parent
Address = namedtuple("Address", "family address netmask broadcast ptp")


def interfaces(**names: str) -> dict:
    """psutil.net_if_addrs()'s shape: interface name -> its IPv4 address."""
    return {name: [Address(socket.AF_INET, ip, "255.0.0.0", None, None)] for name, ip in names.items()}


@pytest.mark.parametrize("platform, launcher", [("linux", "torchrun"), ("darwin", "torchrun"), ("win32", "spawn")])
def test_each_os_gets_its_launcher(monkeypatch, platform, launcher):
    monkeypatch.setattr(sys, "platform", platform)
    assert preferred_launcher() == launcher == preferred_launcher(platform)


def test_on_windows_torchrun_is_refused_with_the_way_that_works(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(TorchrunUnavailable, match="--launcher spawn --nproc 2"):
        torchrun_command("experiments/35-ddp-cpu/train.py", 2)
    with pytest.raises(SystemExit) as caught:
        main(["--nproc-per-node=2", "experiments/35-ddp-cpu/train.py", "--out", str(tmp_path)])
    assert caught.value.code == 2
    assert capsys.readouterr().err == f"error: {ON_WINDOWS}\n"
    assert "pytorch/pytorch#139990" in ON_WINDOWS and "WSL" in ON_WINDOWS


@pytest.mark.parametrize("platform, setting, expected", [
    ("linux", None, True), ("darwin", None, True), ("win32", None, False),
    ("linux", "0", False), ("win32", "1", True)])
def test_libuv_is_off_on_windows_and_wherever_use_libuv_says_so(monkeypatch, platform, setting, expected):
    monkeypatch.setattr(sys, "platform", platform)
    if setting is None:
        monkeypatch.delenv("USE_LIBUV", raising=False)
    else:
        monkeypatch.setenv("USE_LIBUV", setting)
    assert use_libuv() is expected


def test_on_windows_the_store_is_made_without_libuv_and_listens_on_loopback(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.delenv("USE_LIBUV", raising=False)
    store = loopback_store(wait_for_workers=False)
    try:
        assert store.libuvBackend is False  # torch's other backend, the one Windows wheels carry
        mine = [l for l in listening_sockets([os.getpid()]) if l.port == store.port]
        assert [(l.address, l.port) for l in mine] == [("127.0.0.1", store.port)]
    finally:
        del store


def test_the_spawn_path_without_libuv_runs_here(tmp_path):
    """Windows' path, run on this machine: the parent's store and every worker's client store
    without libuv, every listening socket on loopback, a real all-reduce."""
    hold = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os_workers\nfrom minitrain.launch import spawn_workers\n"
                               f"spawn_workers(os_workers.main, 2, {str(hold)!r})"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "USE_LIBUV": "0",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))})
    try:
        lines = []
        while sum(line.count("ready,") for line in lines) < 2:  # two workers' lines may share one
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        listeners = listening_sockets(process_tree(proc.pid))
        hold.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        stop_process_tree(proc, grace=1) if proc.poll() is None else None
    text = "".join(lines) + out
    assert proc.returncode == 0, text
    assert text.count("client store with libuv: False") == 2, text
    assert text.count("done, sum [2.0, 2.0]") == 2, text
    assert len(listeners) >= 3 and all(l.is_loopback for l in listeners), listeners  # store + gloo


@pytest.mark.parametrize("names, expected", [
    ({"lo": "127.0.0.1", "eth0": "10.0.0.5"}, "lo"),  # Linux
    ({"en0": "192.168.1.20", "lo0": "127.0.0.1"}, "lo0"),  # macOS
    ({"Ethernet": "192.168.1.20", "Loopback Pseudo-Interface 1": "127.0.0.1"}, "Loopback Pseudo-Interface 1"),
], ids=["linux", "macos", "windows"])
def test_the_loopback_interface_is_the_one_holding_127_0_0_1(monkeypatch, names, expected):
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: interfaces(**names))
    assert loopback_interface() == expected


def test_this_machines_loopback_interface_holds_127_0_0_1():
    addresses = psutil.net_if_addrs()[loopback_interface()]
    assert "127.0.0.1" in {a.address for a in addresses}


# the doctor


def test_the_doctor_finds_no_fail_on_this_machine():
    checks = doctor.run_checks()
    assert [c.name for c in checks] == ["torch build", "cores and threads", "hostname", "loopback interface",
                                        "port on 127.0.0.1", "kernel sockets", "launcher"]
    assert [c for c in checks if c.status == doctor.FAIL] == []
    assert all(c.status in (doctor.OK, doctor.WARN) and c.found for c in checks)
    assert all(c.fix for c in checks if c.status != doctor.OK)  # every WARN says what to do
    assert subprocess.run([sys.executable, "-m", "minitrain.doctor"], capture_output=True).returncode == 0


def test_an_unresolvable_hostname_on_macos_is_named_with_gloos_error_and_the_fix(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(socket, "gethostname", lambda: "studio.local")

    def fails(*args, **kwargs):
        raise socket.gaierror(8, "nodename nor servname provided, or not known")

    monkeypatch.setattr(socket, "getaddrinfo", fails)
    check = doctor.check_hostname()
    assert check.status == doctor.WARN
    assert check.found.startswith("studio.local does not resolve")
    assert "The IPv6 network addresses of (NAME.local, PORT) cannot be retrieved" in check.fix
    assert "add the line `127.0.0.1 studio.local` to /etc/hosts" in check.fix


def test_a_hostname_lookup_that_hangs_is_a_warn_not_a_hang(monkeypatch):
    released = threading.Event()

    def hangs(*args, **kwargs):
        released.wait(60)
        raise socket.gaierror(-3, "released by the test")  # the doctor's thread ends quietly, not later

    monkeypatch.setattr(socket, "getaddrinfo", hangs)
    start = time.monotonic()
    check = doctor.check_hostname(timeout=0.2)
    assert time.monotonic() - start < 30  # it gave up long before the lookup would have returned
    released.set()
    assert check.status == doctor.WARN and "did not resolve within" in check.found


@pytest.mark.parametrize("platform, names, status, words", [
    ("linux", {"lo": "127.0.0.1"}, "OK", "lo holds 127.0.0.1"),
    ("darwin", {"lo0": "127.0.0.1", "en0": "192.168.1.2"}, "OK", "lo0 holds 127.0.0.1"),
    ("win32", {"Loopback Pseudo-Interface 1": "127.0.0.1"}, "WARN", "gloo on Windows picks its interface"),
    ("linux", {"eth0": "10.0.0.5"}, "FAIL", "no interface holds 127.0.0.1"),
], ids=["linux", "macos", "windows", "no loopback"])
def test_the_loopback_row_per_os(monkeypatch, platform, names, status, words):
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: interfaces(**names))
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    check = doctor.check_loopback()
    assert check.status == status and words in check.found, check


def test_a_gloo_interface_set_elsewhere_is_a_warn(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    check = doctor.check_loopback()
    assert check.status == doctor.WARN and "unset GLOO_SOCKET_IFNAME" in check.fix


@pytest.mark.parametrize("platform, status, words", [
    ("linux", "OK", "Linux: torchrun, python -m minitrain.launch"),
    ("darwin", "OK", "macOS: torchrun"),
    ("win32", "WARN", "Windows: the spawn launcher with libuv off"),
    ("freebsd14", "WARN", "freebsd14: torchrun"),
])
def test_the_launcher_row_per_os(monkeypatch, platform, status, words):
    monkeypatch.setattr(sys, "platform", platform)
    check = doctor.check_launcher()
    assert check.status == status and check.found.startswith(words), check


def test_a_taken_or_malformed_master_port_is_a_fail(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("MASTER_PORT", str(taken.getsockname()[1]))
        check = doctor.check_port()
    assert check.status == doctor.FAIL and "is taken on 127.0.0.1" in check.found
    monkeypatch.setenv("MASTER_PORT", "abc")
    check = doctor.check_port()
    assert check.status == doctor.FAIL and check.found == "MASTER_PORT=abc is not a TCP port (a whole number from 1 to 65535)"


def test_kernel_sockets_per_os(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / ("x" * 120)))
    assert doctor.check_kernel_sockets().status == doctor.WARN  # too long a path for a Unix socket
    monkeypatch.setattr(sys, "platform", "win32")
    assert doctor.check_kernel_sockets().found == "TCP ports on 127.0.0.1 (Windows has no IPC transport)"


def test_a_gpu_build_is_a_warn_and_no_gloo_a_fail(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    assert doctor.check_torch().status == doctor.WARN
    monkeypatch.setattr(torch.distributed, "is_gloo_available", lambda: False)
    check = doctor.check_torch()
    assert check.status == doctor.FAIL and "make venv" in check.fix


def test_the_table_puts_each_fix_under_its_row():
    table = doctor.format_checks([doctor.Check("hostname", "WARN", "box does not resolve", "add it"),
                                  doctor.Check("launcher", "OK", "Linux: torchrun")])
    assert table.splitlines() == ["WARN  hostname  box does not resolve",
                                  "                fix: add it",
                                  "OK    launcher  Linux: torchrun"]


# settings and notebook parameters


TIMEOUT, PORT = "MINITRAIN_COLLECTIVE_TIMEOUT", "MASTER_PORT"
SETTINGS = [  # (variable, its value, what it reads as: a number, or how its one-line error goes on)
    *[(TIMEOUT, value, seconds) for value, seconds in [(None, 60.0), ("", 60.0), (" 30 ", 30.0), ("0.5", 0.5)]],
    *[(TIMEOUT, value, "a number of seconds above 0") for value in ["abc", "0", "-5", "inf", "nan"]],
    *[(PORT, value, port) for value, port in [(None, 0), ("", 0), ("0", 0), ("29500", 29500), ("65535", 65535)]],
    *[(PORT, value, "a TCP port") for value in ["abc", "-1", "65536", "70000", "29500.0"]],
]


@pytest.mark.parametrize("variable, value, expected", SETTINGS)
def test_settings(monkeypatch, variable, value, expected):
    if value is None:
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, value)
    read = {TIMEOUT: collective_timeout_s, PORT: master_port}[variable]
    if isinstance(expected, str):
        with pytest.raises(SettingError, match=f"^{variable}={re.escape(value)} is not {expected}"):
            read()
    else:
        assert read() == expected


GOOD = dict(nproc=2, steps=100, warmup=50, out_dir="", timeout_s=600)


@pytest.mark.parametrize("change, start", [
    ({}, None),
    ({"nproc": 0}, "nproc = 0 is not a whole number of at least 1"),
    ({"nproc": "2"}, "nproc = '2' is not a whole number"),
    ({"nproc": True}, "nproc = True is not a whole number"),
    ({"steps": 0}, "steps = 0 is not a whole number of at least 1"),
    ({"warmup": -1}, "warmup = -1 is not a whole number of at least 0"),
    ({"steps": 50}, "steps (50) must be larger than warmup (50)"),
    ({"out_dir": None}, "out_dir = None is not a folder name"),
    ({"timeout_s": 0}, "timeout_s = 0 is not a number of seconds above 0"),
    ({"timeout_s": float("nan")}, "timeout_s = nan is not a number of seconds above 0"),
])
def test_run_notebook_parameters(change, start):
    problem = run_parameters_problem(**(GOOD | change))
    assert problem == start if start is None else problem.startswith(start)


def test_run_notebook_out_dir_naming_a_file(tmp_path):
    (tmp_path / "a-file").write_text("keep me")
    problem = run_parameters_problem(**(GOOD | {"out_dir": str(tmp_path / "a-file")}))
    assert "is a file, not a folder" in problem


def test_ready_names_the_failed_checks():
    ok, bad = doctor.Check("port on 127.0.0.1", doctor.OK, "free"), doctor.Check("torch build", doctor.FAIL, "CUDA")
    assert doctor.ready([ok]).startswith("all 1 checks OK or WARN")
    with pytest.raises(RuntimeError, match="fix these checks first .*: torch build"):
        doctor.ready([ok, bad])
