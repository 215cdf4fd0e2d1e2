"""The operating system's byte counters of this process's TCP connections (Linux's `ss`, no root).

psutil names this process's connections on any OS, but has no per-socket byte counters; `ss -tin`
reads them from the kernel's tcp_info (Linux 4.19+). Elsewhere the counters are None.
"""

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import torch.distributed as dist


@dataclass(frozen=True)
class Connection:
    """One established TCP connection as `ss -tin` shows it: endpoints and byte counters."""

    local: str  # "127.0.0.1:41234", "[::1]:41234"
    peer: str
    bytes_sent: int  # including any retransmissions
    bytes_retrans: int
    bytes_received: int


def tcp_connections() -> list[Connection] | None:
    """Every established TCP connection this user may see, with counters; None where the OS has
    no `ss` (anything but Linux) or the kernel lacks the counters."""
    if not sys.platform.startswith("linux") or shutil.which("ss") is None:
        return None
    # -t TCP, -i tcp_info (bytes_sent, bytes_received), -n numeric, -H no header
    text = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True,
                          check=True).stdout
    if "bytes_received:" not in text:
        return None  # a kernel before 4.19 has no byte counters
    connections = []
    for record in re.split(r"\n(?=\S)", text.strip()):  # a socket's lines: first unindented, rest indented
        fields = record.split()
        if len(fields) < 4:
            continue
        counters = dict(re.findall(r"\b(bytes_sent|bytes_retrans|bytes_received):(\d+)", record))
        # ss leaves out a counter that is still 0
        connections.append(Connection(fields[2], fields[3], *(int(counters.get(k, 0)) for k in (
            "bytes_sent", "bytes_retrans", "bytes_received"))))
    return connections


def _endpoint(address: tuple[str, int]) -> str:
    """psutil's (ip, port) written as ss writes it."""
    ip, port = address
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def my_connections() -> dict[str, Connection] | None:
    """This process's established TCP connections, each by `LOCAL -> PEER` (a listener's accepted connections share
    its local endpoint: gloo's pairs past 2 ranks); None where unavailable."""
    everything = tcp_connections()
    if everything is None:
        return None
    mine = {_key(_endpoint(c.laddr), _endpoint(c.raddr)) for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.raddr}
    return {key: c for c in everything if (key := _key(c.local, c.peer)) in mine}


def _key(local: str, peer: str) -> str:
    return f"{local} -> {peer}"


def gloo_pair_endpoints(mine: dict[str, Connection] | None) -> list[str]:
    """This rank's connections to the other ranks (`LOCAL -> PEER`): gloo's pair sockets.

    Both ranks also talk to the rendezvous store in torchrun's agent; a connection belongs to a
    gloo pair exactly when its far end is a socket of another rank. A collective: every rank calls it."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, None if mine is None else sorted({c.local for c in mine.values()}))
    others = {endpoint for r, ends in enumerate(everyone) if r != dist.get_rank() for endpoint in ends or []}
    return [] if mine is None else [key for key, c in mine.items() if c.peer in others]


def pair_bytes(endpoints: list[str]) -> dict[str, int] | None:
    """Bytes sent, retransmitted and received so far over the given connections of this process."""
    mine = my_connections()
    if mine is None or not endpoints:
        return None
    return {"sent": sum(mine[e].bytes_sent for e in endpoints),
            "retransmitted": sum(mine[e].bytes_retrans for e in endpoints),
            "received": sum(mine[e].bytes_received for e in endpoints)}


def sent_during(endpoints: list[str], call: Callable[[], object]) -> int | None:
    """Bytes this rank sent on `endpoints` while `call()` ran, every rank's part of it finished; a collective."""
    before = pair_bytes(endpoints)
    call()
    dist.monitored_barrier()  # the call's last messages are on the wire (the barrier's own are a few bytes)
    after = pair_bytes(endpoints)
    return None if before is None or after is None else after["sent"] - before["sent"]
