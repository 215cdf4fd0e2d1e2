"""Two hosts (issue 13, part 3): the lab's launcher across two Linux network namespaces joined by a
veth pair that the run makes and removes itself (root and iproute2 needed, else those tests skip
and say why); its bad input in one line, which needs neither."""

import subprocess
import time

import pytest

from harness import WORKERS, launch
from minitrain import launch as launcher
from minitrain.launch import free_port, hosts
from minitrain.measure.two_hosts import RDZV_PORT, RESULT_NAME, cannot_run, checks, run, two_namespaces

REASON = cannot_run()
needs_namespaces = pytest.mark.skipif(REASON is not None, reason=f"needs root and iproute2's ip netns: {REASON}")
WARNING = "are unauthenticated and unencrypted: anyone who can reach this network can run code on this machine"


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("two_hosts")
    return out, run(out, quick=True, corpus_dir=corpus_dir, echo=lambda _: None)


@needs_namespaces
def test_two_nodes_end_bitwise_equal_to_one_host(two_hosts):
    _, results = two_hosts
    assert results["two_hosts"]["exit_codes"] == [0, 0]
    assert results["two_hosts"]["world_size"] == results["one_host"]["world_size"] == 2
    assert results["two_hosts"]["threads_per_rank"] == results["one_host"]["threads_per_rank"]
    for name, pair in results["weights"].items():
        assert pair["bitwise_equal"] and pair["max_abs_diff"] == 0.0, name
    assert results["bitwise_equal"]
    assert results["losses_identical"] and len(results["losses"]["two"]) == results["plan"]["steps"]


@needs_namespaces
def test_the_live_runs_checks_hold_and_name_a_broken_fact(two_hosts):
    _, results = two_hosts
    assert checks(results) and all(checks(results).values())  # what notebook 14's live run asserts
    broken = results | {"listeners": [*results["listeners"], {"bound_to": "ELSEWHERE"}]}
    assert checks(broken)["every listening socket on its node's own address or loopback"] is False


@needs_namespaces
def test_each_node_writes_into_its_own_folder_as_on_two_disks(two_hosts):
    # each node had its own --out: rank 1 staged and moved its state file there, with no shared folder
    files = two_hosts[1]["two_hosts"]["files"]
    assert files == {"a": ["run.json", "state-rank-0.pt", "timings.jsonl"], "b": ["state-rank-1.pt"]}


@needs_namespaces
def test_every_socket_listens_on_its_nodes_own_address_and_the_host_sees_none(two_hosts):
    _, results = two_hosts
    a, b = (n["address"] for n in results["network"]["nodes"])
    listeners = {(r["node"], r["role"], r["address"]) for r in results["listeners"]}
    # node a's launcher: the rendezvous store and the workers' store; one gloo listener per worker
    assert sum(1 for r in results["listeners"] if (r["node"], r["role"]) == ("a", "launcher")) >= 2
    assert ("a", "launcher", a) in listeners and ("a", "worker", a) in listeners and ("b", "worker", b) in listeners
    assert any(r["port"] == RDZV_PORT and r["address"] == a for r in results["listeners"])
    assert [r for r in results["listeners"] if r["address"] not in (a, b)] == []  # never 0.0.0.0, ::, *
    assert [r for r in results["listeners"] if r["bound_to"] != "its veth address"] == []
    assert results["two_hosts"]["host_namespace_addresses"] == []
    assert results["two_hosts"]["host_namespace_sockets"] == []


@needs_namespaces
def test_each_node_warns_that_the_rendezvous_is_unauthenticated(two_hosts):
    out, results = two_hosts
    for node in ("a", "b"):
        log = (out / "two_hosts-runs" / f"{node}.log").read_text()
        assert log.count(WARNING) == 1, log[-2000:]
    assert all("--host-address=" in command for command in results["two_hosts"]["commands"])


@needs_namespaces
def test_the_namespaces_and_the_veth_pair_are_gone_afterwards(two_hosts):
    out, results = two_hosts
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for node in results["network"]["nodes"]:
        assert node["namespace"] not in namespaces
        assert f" {node['interface']}:" not in links and f" {node['interface']}@" not in links
    assert (out / RESULT_NAME).is_file() and (out / "two_hosts.png").stat().st_size > 0
    assert {r.name: r.value for r in results["findings"]} == {  # what a clean two-node run must show
        "bitwise_equal": 1, "listeners": len(results["listeners"]), "listeners_elsewhere": 0,
        "host_namespace_sockets": 0, "two_hosts_s": results["two_hosts"]["seconds"],
        "one_host_s": results["one_host"]["seconds"]}
    assert len(results["listeners"]) >= 4  # two stores on node a, one gloo socket per worker


@needs_namespaces
def test_a_failure_inside_still_removes_the_namespaces_and_their_processes():
    with pytest.raises(RuntimeError, match="on purpose"):
        with two_namespaces() as (a, b):
            sleeper = subprocess.Popen(["ip", "netns", "exec", a.namespace, "sleep", "300"])
            for _ in range(200):  # the failure comes once the sleeper is inside (under load, ip takes a moment)
                if str(sleeper.pid) in subprocess.run(["ip", "netns", "pids", a.namespace], capture_output=True,
                                                      text=True).stdout.split():
                    break
                time.sleep(0.05)
            raise RuntimeError("on purpose")
    assert sleeper.wait(timeout=10) != 0  # killed, not finished
    assert a.namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("args, says", [
    (["--host-address", "192.0.2.254"], "--host-address 192.0.2.254 is not an address of this machine"),
    (["--host-address", "laptop"], "--host-address laptop is not an IPv4 address"),
    (["--interface", "nosuch0"], "--interface nosuch0 is not a network interface of this machine"),
    (["--nnodes=2"], "--nnodes=2 needs --host-address ADDR or --interface NAME"),
    (["--nnodes=2", "--host-address=127.0.0.1"], "--nnodes=2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes=2", "--host-address=127.0.0.1", "--rdzv-endpoint=127.0.0.1:0"], "--rdzv-endpoint 127.0.0.1:0: port 0 cannot be found"),
    (["--host-address=127.0.0.1", "--interface=lo"], "give --host-address or --interface, not both"),
    (["--standalone"], "--standalone is the lab's launcher's to set"),
])
def test_a_bad_address_or_node_option_is_one_line_and_exit_2(capfd, args, says):
    """The launcher's main(argv) in this process (its one-line errors end to end: test_bad_arguments_more.py)."""
    with pytest.raises(SystemExit) as exit_:
        launcher.main([*args, "--nproc-per-node=1", str(WORKERS), "clean"])
    out, err = capfd.readouterr()
    assert exit_.value.code == 2, out + err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1, err
    assert out == ""


def test_a_secondary_address_is_refused_because_gloo_would_listen_on_the_first(monkeypatch):
    # gloo binds GLOO_SOCKET_IFNAME's first IPv4 address: a secondary --host-address would split the run
    monkeypatch.setattr(hosts, "ipv4_addresses", lambda: {"eth0": ["192.0.2.2", "192.0.2.3"], "lo": ["127.0.0.1"]})
    assert hosts.resolve("192.0.2.2", None) == ("192.0.2.2", "eth0")
    with pytest.raises(hosts.HostError) as refused:
        hosts.resolve("192.0.2.3", None)
    message = str(refused.value)
    assert message.startswith("--host-address 192.0.2.3 is a secondary address of eth0, whose first is 192.0.2.2")
    assert "give --host-address 192.0.2.2" in message and "\n" not in message


def test_a_node_whose_rendezvous_host_never_comes_says_so(reap):
    """The joining side alone, its endpoint an address where nothing listens (127.0.0.2, loopback):
    after --rdzv-conf read_timeout seconds, one line naming the endpoint and what to check."""
    port = free_port()  # nothing listens there, on 127.0.0.1 nor on every interface
    proc = launch("--nnodes=2", "--host-address=127.0.0.1", f"--rdzv-endpoint=127.0.0.2:{port}",
                  "--rdzv-conf=read_timeout=3", "--nproc-per-node=1", str(WORKERS), "clean")
    reap(proc)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert f"error: no rendezvous at 127.0.0.2:{port} within 3 s" in out, out
    assert "Traceback" not in out, out
