"""This machine's IPv4 addresses by network interface (psutil), and the one address a multi-host
run binds: named directly (`--host-address`) or through its interface (`--interface`)."""

import ipaddress
import socket

import psutil


class HostError(ValueError):
    """An address or interface that this machine does not have; the message says which it has."""


def ipv4_addresses() -> dict[str, list[str]]:
    """Each network interface's IPv4 addresses (interfaces without one left out)."""
    found = {name: [a.address for a in addresses if a.family == socket.AF_INET]
             for name, addresses in psutil.net_if_addrs().items()}
    return {name: addresses for name, addresses in found.items() if addresses}


def _listing(addresses: dict[str, list[str]]) -> str:
    return ", ".join(f"{name} {' '.join(a)}" for name, a in sorted(addresses.items())) or "none"


def resolve(host_address: str | None, interface: str | None) -> tuple[str, str]:
    """(address, interface) for `--host-address` or `--interface`: the address must be one of this
    machine's IPv4 addresses and its interface's first (the one gloo binds), the interface must exist
    and hold one (its first is taken)."""
    addresses = ipv4_addresses()
    if interface is not None:
        if interface not in psutil.net_if_addrs():
            raise HostError(f"--interface {interface} is not a network interface of this machine (its interfaces "
                            f"with IPv4: {_listing(addresses)}): name one of them, or use --host-address ADDR")
        if interface not in addresses:
            raise HostError(f"--interface {interface} has no IPv4 address (interfaces with one: "
                            f"{_listing(addresses)}): name one of them, or use --host-address ADDR")
        return addresses[interface][0], interface
    try:
        ipaddress.IPv4Address(host_address)
    except ipaddress.AddressValueError:
        raise HostError(f"--host-address {host_address} is not an IPv4 address (like 192.168.1.20): give this "
                        f"machine's address on the network the others reach it by ({_listing(addresses)})") from None
    for name, held in sorted(addresses.items()):
        if host_address in held:
            if host_address != held[0]:  # GLOO_SOCKET_IFNAME: gloo binds the interface's first IPv4 address
                raise HostError(f"--host-address {host_address} is a secondary address of {name}, whose first is "
                                f"{held[0]}: gloo would listen on {held[0]}; give --host-address {held[0]}, or make "
                                f"{host_address} {name}'s first address")
            return host_address, name
    raise HostError(f"--host-address {host_address} is not an address of this machine (its IPv4 addresses: "
                    f"{_listing(addresses)}): give one of them, or --interface NAME")
