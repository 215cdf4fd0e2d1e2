"""The lab's rendezvous: free ports, TCPStores listening on one address (127.0.0.1 unless the user
names another), and a torchrun rendezvous backend ("minitrain") whose stores listen there and
nowhere else."""

import socket
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from minitrain.gloo_setup import use_libuv

# torchrun's own stores listen on every interface, whatever --master-addr or --rdzv-endpoint says
# (pytorch/pytorch#173909). The lab's launcher is torchrun itself, with a rendezvous backend whose
# stores listen on one address only: a socket we bind ourselves, handed over with master_listen_fd.
LAB_RDZV = "minitrain"
DEFAULT_RDZV_PORT = 29400  # torch's c10d default, for a multi-host --rdzv-endpoint without a port
MASTER_PORT_HINT = "Unset MASTER_PORT to let the lab pick a free port, or choose another one."


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortInUseError(RuntimeError):
    """The port asked for is taken on the address the store binds."""


class RendezvousUnreachable(RuntimeError):
    """A node could not reach the rendezvous store hosted by another node."""


def bound_store(address: str, port: int = 0, hint: str = "", **kwargs) -> dist.TCPStore:
    """A TCPStore server listening on `address`:`port` (0: a free port) and nowhere else; with libuv
    where torch would use it (`minitrain.gloo_setup.use_libuv`: not on Windows, nor with USE_LIBUV=0).
    `hint` ends the message of the PortInUseError raised when the port is taken."""
    sock = socket.socket()
    try:
        sock.bind((address, port))
    except OSError as e:
        sock.close()
        raise PortInUseError(f"port {port} on {address} is already in use ({e.strerror}): another run may "
                             f"hold it. {hint or 'Choose another port.'}") from e
    sock.listen(128)
    port = sock.getsockname()[1]
    kwargs.setdefault("use_libuv", use_libuv())  # TCPStore() itself ignores USE_LIBUV: always libuv
    return dist.TCPStore(address, port, is_master=True, master_listen_fd=sock.detach(), **kwargs)


def loopback_store(port: int = 0, **kwargs) -> dist.TCPStore:
    """A TCPStore server listening on 127.0.0.1:`port` (0: a free port) and nowhere else."""
    return bound_store("127.0.0.1", port, hint=MASTER_PORT_HINT, **kwargs)


class BoundRendezvousHandler(DynamicRendezvousHandler):
    """torch's dynamic (c10d-style) rendezvous, whose shared store for the workers listens only on
    the address of the node that hosts it (torchrun's --local-addr, which the lab's launcher sets)."""

    def _create_tcp_store_server(self, master_addr: str, master_port: int) -> dist.TCPStore:
        # called on the node the rendezvous made rank 0, with that node's --local-addr
        return bound_store(master_addr, master_port, multi_tenant=True)

    def next_rendezvous(self):
        # A fresh store for each round's workers, as torch's _create_c10d_store assumes ("a new TCPStore
        # for every retry", pytorch/pytorch#135957): torch 2.13 keeps the first round's, and after a
        # restart gloo reads the killed workers' addresses from it and hangs minutes in connectFullMesh.
        self._bootstrap_store_info, self._shared_tcp_store_server = None, None
        return super().next_rendezvous()

    def get_backend(self) -> str:
        return LAB_RDZV


def _create_handler(params: RendezvousParameters) -> BoundRendezvousHandler:
    """The node whose --local-addr is the endpoint's host hosts the rendezvous store there (port 0:
    a free one, single node only); every other node connects to it as a client."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_RDZV_PORT)
    address = params.local_addr
    if host == address:
        hint = MASTER_PORT_HINT if params.max_nodes == 1 else "Choose another port in --rdzv-endpoint on every node."
        store = bound_store(address, port, hint=hint, multi_tenant=True)
    else:
        timeout = params.get_as_int("read_timeout", 60)
        try:
            store = dist.TCPStore(host, port, is_master=False, multi_tenant=True, use_libuv=use_libuv(),
                                  timeout=timedelta(seconds=timeout))
        except (RuntimeError, TimeoutError, ValueError) as e:
            raise RendezvousUnreachable(
                f"no rendezvous at {host}:{port} within {timeout} s ({str(e).splitlines()[0]}): start the node "
                f"whose address is {host} (it hosts the rendezvous), check --rdzv-endpoint and that its "
                "firewall lets this machine reach that port") from e
    backend = C10dRendezvousBackend(store, params.run_id)
    return BoundRendezvousHandler.from_backend(params.run_id, store, backend, params.min_nodes,
                                               params.max_nodes, local_addr=address)


def register_lab_rendezvous() -> None:
    """Make `--rdzv-backend=minitrain` known to torchrun in this process (idempotent)."""
    rendezvous_handler_registry.register(LAB_RDZV, _create_handler)
