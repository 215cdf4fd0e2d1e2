"""A run's processes as the operating system sees them, through psutil (Linux and macOS): the
process tree, which of its processes still run, and the TCP sockets they listen on."""

import ipaddress
from dataclasses import dataclass

import psutil

from minitrain.parent_watch import running


@dataclass(frozen=True)
class Listener:
    pid: int
    address: str
    port: int

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def process_tree(root: int) -> list[int]:
    """`root` and all its live descendants. torchrun starts each worker in a session of its own,
    so a process group or session does not hold them all; the parent links do."""
    try:
        descendants = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return alive([root, *(p.pid for p in descendants)]) if running(root) else []


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (zombies count as gone)."""
    return [pid for pid in pids if running(pid)]


def listening_sockets(pids: list[int]) -> list[Listener]:
    """Every TCP socket the given processes listen on (IPv4-mapped IPv6 addresses as IPv4)."""
    found = []
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # the process ended meanwhile, or belongs to someone else
        for c in connections:
            if c.status == psutil.CONN_LISTEN:
                address = ipaddress.ip_address(c.laddr.ip)
                address = getattr(address, "ipv4_mapped", None) or address
                found.append(Listener(pid, str(address), c.laddr.port))
    return found
