"""A run's processes as the operating system sees them (Linux /proc): the process tree, and the
TCP sockets they listen on."""

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"  # TCP state code in /proc/net/tcp


@dataclass(frozen=True)
class Listener:
    pid: int
    address: str
    port: int

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


def _decode_address(hex_addr: str) -> tuple[str, int]:
    """'0100007F:1F90' -> ('127.0.0.1', 8080); IPv6 addresses are four little-endian words."""
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        address = ipaddress.IPv4Address(raw[::-1])
    else:
        address = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        address = address.ipv4_mapped or address
    return str(address), int(port, 16)


def _listening_inodes() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket on this machine."""
    table = {}
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN:
                table[int(fields[9])] = _decode_address(fields[1])
    return table


def listening_sockets(pids: list[int]) -> list[Listener]:
    """Every TCP socket the given processes listen on (Linux only; empty where /proc is missing)."""
    table = _listening_inodes()
    found = []
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # the process ended meanwhile
        for link in links:
            if link.startswith("socket:[") and (inode := int(link[8:-1])) in table:
                found.append(Listener(pid, *table[inode]))
    return found


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (non-zombie) process."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(root: int) -> list[int]:
    """`root` and all its live descendants. torchrun starts each worker in a session of its own,
    so a process group or session does not hold them all; the parent links do."""
    parents = _parents()
    tree = [root] if root in parents else []
    for pid in tree:  # grows while we walk it: breadth first
        tree += [child for child, parent in parents.items() if parent == pid]
    return tree


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (zombies count as gone)."""
    live = _parents()
    return [pid for pid in pids if pid in live]
