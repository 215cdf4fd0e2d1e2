"""Two hosts on one machine: the lab's launcher across two Linux network namespaces joined by a veth
pair (two "laptops" on a private /30 network), against the same run on one host; are the final
weights bitwise the same, and what listens where?

    sudo .venv/bin/python -m minitrain.measure.two_hosts [--out DIR] [--quick]

Needs Linux, root and iproute2's `ip netns`; anywhere else it refuses in one line (exit status 2).
It creates the namespaces and the veth pair itself and deletes them at the end, whatever happens.
Node A hosts the rendezvous (`--rdzv-endpoint` is its address); each node binds only its own
veth address (`--host-address`). Both runs train experiments/35-ddp-cpu/train.py with the same
seeds and one thread per rank; the driver compares their state files and writes two_hosts.json
and two_hosts.png.
"""

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from minitrain.artifacts import save_figure
from minitrain.lab.reporting.report import plural
from minitrain.lab.reporting.results_file import Finding
from minitrain.lab.reporting.runs import read_run
from minitrain.launch import run_streaming, stop_process_tree, torchrun_command
from minitrain.launch.hosts import ipv4_addresses
from minitrain.launch.rendezvous import DEFAULT_RDZV_PORT
from minitrain.measure.measurement import CannotRun, Measurement, as_typed, fresh_folder, runs_folder
from minitrain.paths import BEYOND_DIR, TRAIN_SCRIPT, relative  # noqa: F401 (BEYOND_DIR: for the notebook)
from minitrain.verify import compare_state_files

RESULT_NAME, PLOT_NAME = "two_hosts.json", "two_hosts.png"
RDZV_PORT = DEFAULT_RDZV_PORT  # a fixed port is safe: nothing else lives in namespaces made for this run
RUN_TIMEOUT_S = 300
THREADS = "1"  # what torchrun gives each of 2 ranks on one host; the two-host run gets the same


@dataclass(frozen=True)
class Plan:
    """The training run both sides make (train.py's arguments)."""

    steps: int = 30
    warmup: int = 10
    n_layer: int | None = None  # None: train.py's default model
    n_embd: int | None = None

    @classmethod
    def quick(cls) -> "Plan":
        """A tiny model and 6 steps: for tests and notebooks."""
        return cls(steps=6, warmup=2, n_layer=1, n_embd=32)

    def train_args(self) -> list[str]:
        args = ["--steps", str(self.steps), "--warmup", str(self.warmup)]
        args += ["--n-layer", str(self.n_layer)] if self.n_layer else []
        return args + (["--n-embd", str(self.n_embd)] if self.n_embd else [])


QUICK = Plan.quick()  # the tests' plan


@dataclass(frozen=True)
class Host:
    """One pretend machine: a network namespace, its end of the veth pair, and that end's address."""

    namespace: str
    interface: str
    address: str


def cannot_run() -> str | None:
    """Why this machine cannot make two network namespaces, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux network namespaces; this is {sys.platform}"
    if os.geteuid() != 0:
        return "needs root (creating network namespaces and a veth pair does): run it with sudo"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (apt install iproute2)"
    probe = f"minitrain-probe-{secrets.token_hex(3)}"  # the one sure test: make one, then delete it
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CannotRun(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


@contextlib.contextmanager
def two_namespaces() -> Iterator[tuple[Host, Host]]:
    """Two fresh network namespaces (random names) joined by a veth pair on a random private /30,
    loopback up in each; on exit every process left in them is killed and both are deleted (the
    veth pair goes with them)."""
    reason = cannot_run()
    if reason:
        raise CannotRun(reason)
    tag = secrets.token_hex(3)
    net = f"10.{secrets.randbelow(250) + 1}.{secrets.randbelow(250) + 1}"
    hosts = (Host(f"minitrain-{tag}-a", f"mt{tag}a", f"{net}.1"), Host(f"minitrain-{tag}-b", f"mt{tag}b", f"{net}.2"))
    made: list[str] = []
    try:
        for host in hosts:
            _ip("netns", "add", host.namespace)
            made.append(host.namespace)
        _ip("link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)
        for host in hosts:
            _ip("link", "set", host.interface, "netns", host.namespace)
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/30", "dev", host.interface)
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            _ip("-n", host.namespace, "link", "set", host.interface, "up")
        yield hosts
    finally:
        for namespace in made:
            _kill_everything_in(namespace)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", hosts[0].interface], capture_output=True)  # if never moved


def _kill_everything_in(namespace: str) -> None:
    """SIGKILL each process still in `namespace` (only this run's: the namespace was made for it)."""
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)


def node_command(host: Host, endpoint: str, script_args: list[str]) -> list[str]:
    """The lab's launcher for one node of two, inside `host`'s namespace, bound to its address."""
    return ["ip", "netns", "exec", host.namespace, sys.executable, "-m", "minitrain.launch",
            f"--host-address={host.address}", "--nnodes=2", "--nproc-per-node=1", f"--rdzv-endpoint={endpoint}",
            *script_args]


def run_two_nodes(hosts: tuple[Host, Host], script_args: list[str], outs: list[Path], logs: Path) -> dict:
    """Both nodes of a run, each writing into its own `--out` (as two machines' own disks), node A
    hosting the rendezvous; while they run, every listening TCP
    socket in each node's namespace (`ss` inside it) and every socket of the machine's own namespace
    that touches the nodes' addresses. Returns the commands, exit codes, sockets and seconds."""
    endpoint = f"{hosts[0].address}:{RDZV_PORT}"
    commands = [node_command(h, endpoint, [*script_args, "--out", str(o)]) for h, o in zip(hosts, outs)]
    env = {**os.environ, "OMP_NUM_THREADS": THREADS}
    started = time.perf_counter()
    procs = []
    for host, command in zip(hosts, commands):
        with open(logs / f"{host.namespace[-1]}.log", "w") as log:
            procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
    seen: dict[tuple, dict] = {}
    in_host_namespace: set[str] = set()
    polls = 0
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the two-node run did not finish within {RUN_TIMEOUT_S} s; logs in {logs}")
            for host, proc in zip(hosts, procs):
                for address, port, pid in namespace_listeners(host.namespace):
                    role = "launcher" if pid == proc.pid else "worker" if pid else "unknown"
                    seen.setdefault((host.namespace, role, address, port),
                                    {"node": host.namespace[-1], "role": role, "address": address, "port": port})
            in_host_namespace |= host_sockets_touching({h.address for h in hosts})
            polls += 1
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_process_tree(proc, grace=2)
    return {"commands": [as_typed(c) for c in commands], "exit_codes": [p.returncode for p in procs],
            "seconds": time.perf_counter() - started, "polls": polls,
            "listeners": sorted(seen.values(), key=lambda r: (r["node"], r["role"], r["address"], r["port"])),
            "host_namespace_sockets": sorted(in_host_namespace),
            "host_namespace_addresses": sorted(a for held in ipv4_addresses().values() for a in held
                                               if a in {h.address for h in hosts})}


def namespace_listeners(namespace: str) -> list[tuple[str, int, int | None]]:
    """(address, port, pid) of every listening TCP socket in `namespace`, from `ss -tlnp` run inside
    it (psutil reads the caller's namespace only); a wildcard address shows as 0.0.0.0 or ::."""
    lines = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Htlnp"], capture_output=True,
                           text=True).stdout.splitlines()
    found = []
    for line in lines:
        local = line.split()[3]
        address, port = local.rsplit(":", 1)
        address = address.strip("[]").split("%")[0]
        address = {"*": "0.0.0.0", "::ffff:0.0.0.0": "0.0.0.0"}.get(address, address.removeprefix("::ffff:"))
        pid = re.search(r"pid=(\d+)", line)
        found.append((address, int(port), int(pid.group(1)) if pid else None))
    return found


def host_sockets_touching(addresses: set[str]) -> set[str]:
    """The machine's own namespace's TCP sockets with either end on one of `addresses`."""
    return {f"{c.laddr.ip}:{c.laddr.port} -> {c.raddr.ip if c.raddr else '*'}:{c.raddr.port if c.raddr else '*'}"
            for c in psutil.net_connections("tcp")
            if c.laddr.ip in addresses or (c.raddr and c.raddr.ip in addresses)}


def measure(out: Path, plan: Plan, corpus_dir: Path, echo) -> dict:
    """The two-node run in namespaces, then the same run as 2 processes on one host: two_hosts.json's content.
    Raises CannotRun (not Linux, not root, no iproute2), saying why."""
    reason = cannot_run()
    if reason:
        raise CannotRun(f"cannot make two network namespaces here: {reason}")
    with fresh_folder(runs_folder(out, "two_hosts")) as runs:
        two, one = runs / "two-hosts", runs / "one-host"
        # each node its own --out, as on two laptops: rank 0's files land in a/, rank 1's in b/
        train = [str(TRAIN_SCRIPT), *plan.train_args(), "--corpus-dir", str(corpus_dir)]
        with two_namespaces() as hosts:
            echo(f"namespaces {hosts[0].namespace} ({hosts[0].address}) and {hosts[1].namespace} "
                 f"({hosts[1].address}), joined by veth {hosts[0].interface} <-> {hosts[1].interface}")
            two_nodes = run_two_nodes(hosts, train, [two / "a", two / "b"], runs)
        if two_nodes["exit_codes"] != [0, 0]:
            logs = "\n".join((runs / f"{n}.log").read_text()[-2000:] for n in ("a", "b"))
            raise RuntimeError(f"the two-node run failed, exit codes {two_nodes['exit_codes']}:\n{logs}")
        echo(f"two nodes: done in {two_nodes['seconds']:.1f} s")
        one_started = time.perf_counter()
        one_command = torchrun_command(TRAIN_SCRIPT, 2, *train[1:], "--out", str(one))
        run_streaming(one_command, timeout=RUN_TIMEOUT_S, echo=lambda line: None)
        one_host = {"command": as_typed(one_command),
                    "seconds": time.perf_counter() - one_started}
        echo(f"one host: done in {one_host['seconds']:.1f} s")
        return analyse(two, one, two_nodes, one_host, hosts, plan)


def analyse(two: Path, one: Path, two_nodes: dict, one_host: dict, hosts: tuple[Host, Host], plan: Plan) -> dict:
    """two_hosts.json's content (without provenance): the runs, the sockets, the weights compared."""
    rank0 = {"two": two / "a", "one": one}  # where each run's rank 0 wrote run.json and timings.jsonl
    runs, losses = {}, {}
    for name, folder in rank0.items():
        runs[name], timings = read_run(folder)
        losses[name] = [r["loss"] for r in timings]
    states = {0: two / "a" / "state-rank-0.pt", 1: two / "b" / "state-rank-1.pt"}
    pairs = {f"two-hosts rank {r} vs one-host rank {r}": (states[r], one / f"state-rank-{r}.pt")
             for r in (0, 1)} | {"two-hosts rank 0 vs rank 1": (states[0], states[1])}
    compared = {name: compare_state_files(a, b) for name, (a, b) in pairs.items()}
    addresses = {h.namespace[-1]: h.address for h in hosts}
    listeners = [row | {"bound_to": "its veth address" if row["address"] == addresses[row["node"]]
                        else "loopback" if row["address"].startswith("127.") else "ELSEWHERE"}
                 for row in two_nodes["listeners"]]
    return {
        "plan": asdict(plan),
        "network": {"nodes": [asdict(h) | {"node": h.namespace[-1]} for h in hosts], "prefix": 30,
                    "rendezvous": f"{hosts[0].address}:{RDZV_PORT}", "link": "a veth pair, one end in each namespace"},
        "two_hosts": {k: v for k, v in two_nodes.items() if k != "listeners"}
                     | {"files": {node: sorted(p.name for p in (two / node).iterdir()) for node in ("a", "b")},
                        "threads_per_rank": runs["two"].threads_per_rank, "world_size": runs["two"].world_size,
                        "step_ms_median": runs["two"].summary["step_ms"]["median"],
                        "allreduce_ms_median": runs["two"].summary["allreduce_ms"]["median"]},
        "one_host": one_host | {"threads_per_rank": runs["one"].threads_per_rank,
                                "world_size": runs["one"].world_size,
                                "step_ms_median": runs["one"].summary["step_ms"]["median"],
                                "allreduce_ms_median": runs["one"].summary["allreduce_ms"]["median"]},
        "listeners": listeners,
        "weights": {name: {"bitwise_equal": c.bitwise_equal, "max_abs_diff": c.max_abs_diff} for name, c in compared.items()},
        "losses": losses,
        "losses_identical": losses["two"] == losses["one"],
        "bitwise_equal": all(c.bitwise_equal for c in compared.values()),
    }


def findings(results: dict) -> list[Finding]:
    """The headline facts: same weights or not, where the sockets were, what the host could reach, the times."""
    listeners = results["listeners"]
    return [
        Finding("bitwise_equal", int(results["bitwise_equal"]), "1 = yes, 0 = no",
                "two nodes in two network namespaces end with weights bitwise equal to one host's 2-process run "
                "(same seeds, one thread per rank)"),
        Finding("listeners", len(listeners), "sockets", "listening sockets the two nodes' processes opened"),
        Finding("listeners_elsewhere", sum(r["bound_to"] == "ELSEWHERE" for r in listeners), "sockets",
                "of them, bound to anything but the node's own veth address or loopback (0.0.0.0 counts)"),
        Finding("host_namespace_sockets", len(results["two_hosts"]["host_namespace_sockets"]), "sockets",
                "TCP sockets of the machine's own network namespace with an end on a node's address, during the run"),
        Finding("two_hosts_s", results["two_hosts"]["seconds"], "s", "the two-node run, launch to exit"),
        Finding("one_host_s", results["one_host"]["seconds"], "s", "the one-host 2-process run, launch to exit"),
    ]


def plot(results: dict, out: Path) -> None:
    """The loss per step of both runs (one curve if they agree), and the median step and all-reduce times."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(results["losses"]["one"], "o-", color="#4c72b0", label="one host, 2 processes", linewidth=3)
    ax1.plot(results["losses"]["two"], "x--", color="#dd8452", label="two namespaces, 1 process each")
    ax1.set_xlabel("step")
    ax1.set_ylabel("rank 0's loss")
    ax1.set_title(f"Loss per step: identical: {results['losses_identical']}")
    ax1.legend(fontsize=8)
    labels = ["step", "all-reduce"]
    one = [results["one_host"]["step_ms_median"], results["one_host"]["allreduce_ms_median"]]
    two = [results["two_hosts"]["step_ms_median"], results["two_hosts"]["allreduce_ms_median"]]
    x = range(len(labels))
    ax2.bar([i - 0.2 for i in x], one, 0.4, color="#4c72b0", label="one host (loopback)")
    ax2.bar([i + 0.2 for i in x], two, 0.4, color="#dd8452", label="two namespaces (veth)")
    ax2.set_xticks(list(x), labels)
    ax2.set_ylabel("ms, median after warm-up (rank 0)")
    ax2.set_title("Median times, one run each (no spread)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"Two hosts in network namespaces: final weights bitwise equal to one host's: {results['bitwise_equal']}",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / PLOT_NAME)


def what_ran(results: dict) -> str:
    """The runs compared, for the provenance line."""
    two, plan = results["two_hosts"], results["plan"]
    return (f"2 nodes x 1 process in network namespaces, against 2 processes on one host; {plan['steps']} steps, "
            f"{plural(two['threads_per_rank'], 'thread')} per rank")


def commands_table(results: dict) -> str:
    """The network made, and the two nodes' commands as run (each inside its namespace)."""
    net = results["network"]
    lines = [f"node {n['node']}: namespace {n['namespace']}, interface {n['interface']}, address "
             f"{n['address']}/{net['prefix']}" for n in net["nodes"]]
    lines.append(f"link: {net['link']}; rendezvous at {net['rendezvous']} (node a hosts it)")
    lines += [f"node {n['node']}: {c}" for n, c in zip(net["nodes"], results["two_hosts"]["commands"])]
    lines.append(f"one host: {results['one_host']['command']}")
    return "\n".join(lines)


def listeners_table(results: dict) -> str:
    """Every listening socket the two nodes opened, which process held it, and where it was bound."""
    lines = [f"node {r['node']} {r['role']:<8} listens on {r['address']}:{r['port']:<5}  ({r['bound_to']})"
             for r in results["listeners"]]
    two = results["two_hosts"]
    every = f", about every {two['seconds'] / two['polls']:.2f} s" if two["polls"] else ""
    lines.append(f"the sockets read {two['polls']} times during the run{every} (a 0.1 s pause between reads)")
    lines.append(f"the machine's own namespace, read as often: the nodes' addresses on its "
                 f"interfaces: {two['host_namespace_addresses'] or 'none'}; its sockets touching them: "
                 f"{two['host_namespace_sockets'] or 'none'}")
    return "\n".join(lines)


def weights_table(results: dict) -> str:
    """Each pair of state files compared: bitwise equal, largest difference; the losses; the threads."""
    lines = [f"{name}: bitwise equal {w['bitwise_equal']}, largest |diff| {w['max_abs_diff']:.3e}"
             for name, w in results["weights"].items()]
    lines.append(f"rank 0's loss identical at every step: {results['losses_identical']}")
    lines.append(f"threads per rank: {results['two_hosts']['threads_per_rank']} (two hosts), "
                 f"{results['one_host']['threads_per_rank']} (one host)")
    return "\n".join(lines)


def checks(results: dict) -> dict[str, bool]:
    """The facts a run must show on any machine (a live run's show_checks fails naming any that does not)."""
    return {"two nodes bitwise equal to one host": results["bitwise_equal"],
            "every listening socket on its node's own address or loopback":
                all(r["bound_to"] != "ELSEWHERE" for r in results["listeners"])}


def takeaway(results: dict) -> str:
    """The verdict and the sockets, then both runs' times side by side: one run each, so no spread."""
    two, one = results["two_hosts"], results["one_host"]
    elsewhere = sum(r["bound_to"] == "ELSEWHERE" for r in results["listeners"])
    verdict = "bitwise equal to" if results["bitwise_equal"] else "NOT bitwise equal to"
    return "\n".join([
        f"The two-node run's final weights are {verdict} the one-host run's ({two['world_size']} ranks, "
        f"{plural(two['threads_per_rank'], 'thread')} each, same seeds); of its "
        f"{plural(len(results['listeners']), 'listening socket')}, {elsewhere} bound anywhere but the node's own "
        "address or loopback.",
        f"{'':<17}  {'two nodes':>9}  {'one host':>9}",
        f"{'launch to exit':<17}  {two['seconds']:7.1f} s  {one['seconds']:7.1f} s",
        f"{'median step':<17}  {two['step_ms_median']:6.1f} ms  {one['step_ms_median']:6.1f} ms",
        f"{'median all-reduce':<17}  {two['allreduce_ms_median']:6.1f} ms  {one['allreduce_ms_median']:6.1f} ms",
        "One run of each, so no spread: a gap between the columns is no finding. The two-node run also shared the "
        "CPUs with the driver's socket-table reads; the one-host run did not.",
    ])


def report(results: dict) -> str:
    """What `python -m` prints: the commands, the sockets and the weights compared."""
    return "\n".join([commands_table(results), listeners_table(results), weights_table(results)])


MEASUREMENT = Measurement("two_hosts", "Two hosts: the lab's launcher across two network namespaces",
                          "14-two-hosts.ipynb", (PLOT_NAME,), measure, findings, plot, report,
                          Plan.quick.__doc__, Plan)
run, main = MEASUREMENT.run, MEASUREMENT.main

if __name__ == "__main__":
    main()
