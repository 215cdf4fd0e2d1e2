"""The lab's launcher, `python -m minitrain.launch [torchrun options] SCRIPT ...`: torchrun itself
(its elastic agent and failure reports), every port on loopback; with `--host-address ADDR` or
`--interface NAME`, on that one address instead, for a run across machines (`--nnodes=2`). Not on
Windows, where torchrun's rendezvous asks for libuv, which PyTorch's Windows wheels lack (the spawn
launcher works there: `train.py --launcher spawn`)."""

import argparse
import atexit
import ctypes
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed.run as torch_run
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import elastic_launch
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from minitrain.as_main import run_as_main
from minitrain.cli import BAD_USAGE, SettingError, check_environment, master_port
from minitrain.gloo_setup import loopback_interface, on_windows
from minitrain.parent_watch import WATCH_PID, exit_with_parent
from minitrain.launch.hosts import HostError, resolve
from minitrain.launch.rendezvous import (DEFAULT_RDZV_PORT, LAB_RDZV, PortInUseError, RendezvousUnreachable,
                                         register_lab_rendezvous)

USAGE = "python -m minitrain.launch --nproc-per-node=N SCRIPT [SCRIPT ARGS ...]"
ON_WINDOWS = ("torchrun does not run with PyTorch's Windows wheels: its rendezvous asks for libuv, which they "
              "lack (pytorch/pytorch#139990, #175316). Use the spawn launcher, which runs with libuv off: "
              "python experiments/35-ddp-cpu/train.py --launcher spawn --nproc 2 (or run the lab in WSL)")
LOOPBACK = "127.0.0.1"
LAUNCH_COMMAND = "MINITRAIN_LAUNCH_COMMAND"  # the command that started a run, for its run.json
LAB_OPTIONS = ("--host-address", "--interface")
UNAUTHENTICATED = ("warning: the rendezvous and gloo on {address} are unauthenticated and unencrypted: anyone who "
                   "can reach this network can run code on this machine,\njoin the run, feed it data or read the "
                   "gradients. Use it only on a network you trust (docs/security.md).")
REJECTED = "the script rejected its arguments or input (see the line above)"
WARM = "MINITRAIN_WARM_RANKS"  # "1" (the tests set it): workers forked from the launcher, and run_ranks on warm ranks
PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h)


class TorchrunUnavailable(RuntimeError):
    """torchrun cannot run on this operating system (Windows); the message names the way that works."""


def preferred_launcher(platform: str | None = None) -> str:
    """The launcher for this OS (or `platform`, as in sys.platform): "torchrun" (the lab's own,
    `python -m minitrain.launch`) on Linux and macOS, "spawn" (`train.py --launcher spawn`) on Windows."""
    return "spawn" if (platform or sys.platform) == "win32" else "torchrun"


def torchrun_command(script: str | Path, nproc: int, *script_args: str, module: bool = False) -> list[str]:
    """The lab's torchrun with `nproc` workers on this interpreter, every port on loopback (see
    `main`); with `module`, `script` is a module name, run as `python -m script` (torchrun's -m).
    On Windows it raises TorchrunUnavailable, whose message names the spawn launcher."""
    if preferred_launcher() != "torchrun":
        raise TorchrunUnavailable(ON_WINDOWS)
    return [sys.executable, "-m", "minitrain.launch", f"--nproc-per-node={nproc}",
            *(["-m"] if module else []), str(script), *script_args]


def main(argv: list[str] | None = None) -> None:
    """`python -m minitrain.launch [--host-address ADDR | --interface NAME] [torchrun options] SCRIPT ...`:
    torchrun with every store and gloo socket on 127.0.0.1, or on ADDR only (across machines).

    A bad option, SCRIPT, address or setting ends at once in one line with exit status 2, as does a
    run whose workers all stopped with status 2 (the script rejected its arguments and said so in
    one line)."""
    argv = sys.argv[1:] if argv is None else argv
    if on_windows():
        _usage_error(ON_WINDOWS)
    try:
        check_environment()
    except SettingError as e:
        _usage_error(str(e))
    parsed, options, script = _check_arguments(argv)
    place = _placement(parsed)
    # port 0: the store binds a free port itself, no race; the endpoint comes last, so it is the one used
    args = ["--nnodes=1", f"--rdzv-backend={LAB_RDZV}", f"--local-addr={place.address}", *options,
            f"--rdzv-endpoint={place.endpoint}", *script]
    # started by run_streaming: if that process dies hard (a Jupyter kernel), stop this run too;
    # from a shell, Ctrl-C and a closed terminal already do, and a nohup'ed run keeps running
    exit_with_parent("the launcher", on_gone=_stop_workers, only_when_asked=True)
    os.environ[WATCH_PID] = str(os.getpid())  # and each worker stops if this launcher dies
    register_lab_rendezvous()
    if place.address == LOOPBACK:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    else:  # gloo binds the interface's first IPv4 address (gloo's tcp device: lookupAddrForIface)
        os.environ["GLOO_SOCKET_IFNAME"] = place.interface
        print(UNAUTHENTICATED.format(address=place.address), file=sys.stderr, flush=True)
    os.environ[LAUNCH_COMMAND] = " ".join(["python -m minitrain.launch", *argv])
    quiet = _QuietWhenRejected(logging.getLogger("torch.distributed.elastic.multiprocessing.api"),
                               logging.getLogger("torch.multiprocessing.spawn"))  # forked workers' (_torchrun)
    try:
        _torchrun(args)
    except (PortInUseError, RendezvousUnreachable) as e:
        sys.exit(f"error: {e}")
    except ChildFailedError as e:
        if rejected(e):
            quiet.drop()
            print(f"error: {REJECTED}", file=sys.stderr, flush=True)
            sys.exit(BAD_USAGE)
        quiet.release()
        sys.exit(f"error: the run failed, {describe_failures(e)}")
    finally:
        quiet.release()


def _torchrun(args: list[str]) -> None:
    """torchrun's main; with $MINITRAIN_WARM_RANKS=1 (the tests) on Linux, its agent forks each worker from this
    process, which has imported torch (torchrun's --start-method=fork, which it applies to a function entrypoint, as
    with its --run-path): about 2 s of CPU less a worker. The rendezvous, the agent's watch, its restarts and failure
    reports stay torchrun's own. Only on Linux: the worker's start undoes the fork's leftovers through /proc and
    prctl, and macOS's system libraries do not survive a fork without exec."""
    parsed = torch_run.parse_args(args)
    if os.environ.get(WARM) != "1" or sys.platform != "linux" or parsed.no_python or parsed.run_path:
        torch_run.main(args)
        return
    config, _, cmd_args = torch_run.config_from_args(parsed)
    config.start_method = "fork"  # multiprocessing flushes this process's stdout and stderr before it forks
    elastic_launch(config=config, entrypoint=_forked_worker)(*cmd_args)


def _forked_worker(*cmd_args: str) -> None:
    """torchrun's `python -u [-m] SCRIPT ARGS` (config_from_args's) in a worker forked from the launcher, started as
    torchrun starts a new interpreter: in a session of its own, without the launcher's TCP sockets, the agent's
    signal handlers, torch's death signal and fault handler, the launcher's exit functions; output written through
    line by line, the script's folder first on sys.path (for -m, the launcher's working folder), torch's threads
    from OMP_NUM_THREADS (libgomp read it when the launcher imported torch, before torchrun set it). The script's
    exit status is the worker's."""
    os.setsid()
    _release_tcp_sockets()
    for name in os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").split(","):
        sig = getattr(signal, name)
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 0)  # torch.multiprocessing's SIGINT on the launcher's death
    faulthandler.disable()  # elastic's record() enabled it
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    atexit._clear()
    for stream in filter(None, (sys.stdout, sys.stderr)):
        stream.reconfigure(line_buffering=True, write_through=True)
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    module = cmd_args[1] == "-m"
    target, *args = cmd_args[2 if module else 1:]
    if not module:
        sys.path[0] = str(Path(target).resolve().parent)
    code = run_as_main(target, args, module)
    if code:
        sys.exit(code)


def _release_tcp_sockets() -> None:
    """This process's copies of the launcher's TCP sockets (its stores' listener and connections) released: a worker
    torchrun starts has none (its Popen closes every descriptor past stderr), and a copy would keep a port held or a
    connection open that the launcher closed. /dev/null takes each one's number, so that an object of the launcher's
    that closes its socket later closes nothing of the worker's."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket, or the listing's own descriptor, gone
            continue
        if fd > 2 and sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
            os.dup2(null, fd)
        sock.detach()
    os.close(null)


def _usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(BAD_USAGE)


def _check_arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """torchrun's own parser with the lab's two options, its errors in one line; then --nproc-per-node
    and SCRIPT. Returns the parsed options, torchrun's options (the lab's taken out), SCRIPT and its
    arguments."""
    parser = torch_run.get_args_parser()
    torch_options = set(parser._option_string_actions)
    parser.add_argument("--host-address", help="this machine's IPv4 address: every store and gloo socket "
                        "binds it (a multi-host run)")
    parser.add_argument("--interface", help="the network interface whose IPv4 address to bind, instead")
    parser.error = lambda message: _usage_error(  # type: ignore[method-assign]
        f"no SCRIPT to run: {USAGE}" if "training_script" in message else f"{message} (usage: {USAGE})")
    parsed = parser.parse_args(argv)
    nproc = parsed.nproc_per_node
    if not ((nproc.isdigit() and int(nproc) >= 1) or nproc in ("cpu", "auto")):
        _usage_error(f"--nproc-per-node={nproc} is not a whole number of at least 1: use 1 or 2 for this lab")
    script = parsed.training_script
    if not (parsed.module or parsed.no_python) and not Path(script).is_file():
        _usage_error(f"SCRIPT {script} is not a file: give the path of a Python script, e.g. "
                     "experiments/35-ddp-cpu/train.py (or -m MODULE for a module)")
    for name in ("standalone", "rdzv_backend", "local_addr", "master_addr"):
        if getattr(parsed, name) != parser.get_default(name):
            option = "--" + name.replace("_", "-")
            _usage_error(f"{option} is the lab's launcher's to set (its stores and gloo bind only 127.0.0.1, or "
                         "the address you give): leave it out; for another address use --host-address ADDR "
                         "or --interface NAME")
    split = len(argv) - 1 - len(parsed.training_script_args)  # SCRIPT and what follows it
    return parsed, _without_lab_options(argv[:split], torch_options), argv[split:]


def _without_lab_options(options: list[str], torch_options: set[str]) -> list[str]:
    """`options` without --host-address and --interface (or a prefix argparse took for one) and their values."""
    kept, skip = [], False
    for word in options:
        name = word.split("=", 1)[0]
        if skip:
            skip = False
        elif name.startswith("--") and name not in torch_options and any(o.startswith(name) for o in LAB_OPTIONS):
            skip = "=" not in word
        else:
            kept.append(word)
    return kept


@dataclass(frozen=True)
class Placement:
    """Where this node's sockets bind, and the rendezvous endpoint it hosts or joins."""

    address: str
    interface: str | None
    endpoint: str


def _placement(parsed: argparse.Namespace) -> Placement:
    """127.0.0.1 on a free port (or $MASTER_PORT) by default; with --host-address or --interface that
    address, and for more than one node the --rdzv-endpoint every node names (its host as an IPv4
    address, so the node it belongs to knows that it hosts the store)."""
    try:
        _, max_nodes = torch_run.parse_min_max_nnodes(parsed.nnodes)
    except (RuntimeError, ValueError):
        _usage_error(f"--nnodes={parsed.nnodes} is not a number of machines (N, or MIN:MAX): e.g. --nnodes=2")
    if parsed.host_address is not None and parsed.interface is not None:
        _usage_error("give --host-address or --interface, not both: they name the same thing")
    if parsed.host_address is None and parsed.interface is None:
        if max_nodes > 1:
            _usage_error(f"--nnodes={parsed.nnodes} needs --host-address ADDR or --interface NAME: the address the "
                         "other machines reach this one by (its stores and gloo bind it only)")
        return Placement(LOOPBACK, None, f"{LOOPBACK}:{_port(parsed, master_port())}")
    try:
        address, interface = resolve(parsed.host_address, parsed.interface)
    except HostError as e:
        _usage_error(str(e))
    if max_nodes == 1:
        return Placement(address, interface, f"{address}:{_port(parsed, master_port())}")
    if not parsed.rdzv_endpoint:
        _usage_error(f"--nnodes={parsed.nnodes} needs --rdzv-endpoint HOST:PORT on every machine: the address of the "
                     f"one that hosts the rendezvous and a port open there, e.g. --rdzv-endpoint {address}:"
                     f"{DEFAULT_RDZV_PORT} if it is this one")
    host, port = parse_rendezvous_endpoint(parsed.rdzv_endpoint, default_port=DEFAULT_RDZV_PORT)
    if port == 0:
        _usage_error(f"--rdzv-endpoint {parsed.rdzv_endpoint}: port 0 cannot be found by the other machines; "
                     f"name a port, e.g. {host}:{DEFAULT_RDZV_PORT}")
    try:
        host = socket.gethostbyname(host)
    except OSError:
        _usage_error(f"--rdzv-endpoint {parsed.rdzv_endpoint}: {host} does not resolve; give the hosting machine's "
                     "IPv4 address")
    return Placement(address, interface, f"{host}:{port}")


def _port(parsed: argparse.Namespace, default: int) -> int:
    """The port of a single-node --rdzv-endpoint (its host is always this node's address), else `default`."""
    if not parsed.rdzv_endpoint:
        return default
    return parse_rendezvous_endpoint(parsed.rdzv_endpoint, default_port=default)[1]


def rejected(error: ChildFailedError) -> bool:
    """True when the first worker to fail exited with status 2, the lab's status for a bad argument
    or input it has reported in one line, and every other failed worker did the same or was stopped
    by torchrun's SIGTERM."""
    _, first = error.get_first_failure()
    return first.exitcode == BAD_USAGE and all(
        f.exitcode in (BAD_USAGE, -signal.SIGTERM) for f in error.failures.values())


class _QuietWhenRejected(logging.Filter):
    """Holds back torchrun's "Sending process N closing signal SIGTERM" lines (for forked workers, torch's
    "Terminating process N via signal SIGTERM") until it is known why the workers are being stopped; after a
    first failure with status 2 those lines and "failed (exitcode: 2)" are dropped (the script has said what is
    wrong), otherwise logged as they were."""

    def __init__(self, *loggers: logging.Logger) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []
        for logger in loggers:
            logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_minitrain_released", False):
            return True
        if isinstance(record.msg, str) and (record.msg.startswith("Terminating process") or (
                record.msg.startswith("Sending process") and "closing signal" in record.msg)):
            self.held.append(record)
            return False
        if isinstance(record.msg, str) and record.msg.startswith("failed (exitcode") and record.args \
                and record.args[0] == BAD_USAGE:
            self.drop()
            return False
        self.release()
        return True

    def drop(self) -> None:
        self.held = []

    def release(self) -> None:
        held, self.held = self.held, []
        for record in held:
            record._minitrain_released = True
            logging.getLogger(record.name).handle(record)


def _stop_workers() -> None:
    """SIGTERM to this launcher: torchrun's own handler stops every worker, then exits; should it
    take more than 5 s, exit_with_parent's os._exit follows (the workers then stop on their own)."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)


def describe_failures(error: ChildFailedError) -> str:
    """Which ranks failed and how, first failure first: 'rank 1 (pid 42) was killed by SIGKILL'."""
    first_rank, _ = error.get_first_failure()
    ranks = [first_rank] + sorted(r for r in error.failures if r != first_rank)
    parts = []
    for rank in ranks:
        failure = error.failures[rank]
        how = (f"was killed by {signal.Signals(-failure.exitcode).name}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode}")
        parts.append(f"rank {rank} (pid {failure.pid}) {how}")
    return "; ".join(parts) + " (first failure first; the worker's own message is above)"
