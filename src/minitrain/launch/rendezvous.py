"""The loopback-only rendezvous: free ports and TCPStores on 127.0.0.1, and a torchrun rendezvous
backend ("loopback") whose stores listen there and nowhere else."""

import socket

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from minitrain.ddp import use_libuv

# torchrun's own stores listen on every interface, whatever --master-addr or --rdzv-endpoint says
# (pytorch/pytorch#173909). The lab's launcher is torchrun itself, with a rendezvous backend whose
# stores listen on 127.0.0.1 only: a socket we bind ourselves, handed over with master_listen_fd.
LOOPBACK_RDZV = "loopback"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortInUseError(RuntimeError):
    """The port asked for on 127.0.0.1 is taken."""


def loopback_store(port: int = 0, **kwargs) -> dist.TCPStore:
    """A TCPStore server listening on 127.0.0.1:`port` (0: a free port) and nowhere else; with libuv
    where torch would use it (`minitrain.ddp.use_libuv`: not on Windows, nor with USE_LIBUV=0)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        sock.close()
        raise PortInUseError(
            f"port {port} on 127.0.0.1 is already in use ({e.strerror}): another run may hold it. "
            "Unset MASTER_PORT to let the lab pick a free port, or choose another one.") from e
    sock.listen(128)
    port = sock.getsockname()[1]
    kwargs.setdefault("use_libuv", use_libuv())  # TCPStore() itself ignores USE_LIBUV: always libuv
    return dist.TCPStore("127.0.0.1", port, is_master=True, master_listen_fd=sock.detach(), **kwargs)


class LoopbackRendezvousHandler(DynamicRendezvousHandler):
    """torch's dynamic rendezvous, whose shared store for the workers listens on loopback only."""

    def _create_tcp_store_server(self, master_addr: str, master_port: int) -> dist.TCPStore:
        return loopback_store(master_port, multi_tenant=True)

    def get_backend(self) -> str:
        return LOOPBACK_RDZV


def _create_loopback_handler(params: RendezvousParameters) -> LoopbackRendezvousHandler:
    _, port = parse_rendezvous_endpoint(params.endpoint, default_port=0)
    store = loopback_store(port, multi_tenant=True)
    backend = C10dRendezvousBackend(store, params.run_id)
    return LoopbackRendezvousHandler.from_backend(params.run_id, store, backend, params.min_nodes,
                                                  params.max_nodes, local_addr="127.0.0.1")


def register_loopback_rendezvous() -> None:
    """Make `--rdzv-backend=loopback` known to torchrun in this process (idempotent)."""
    rendezvous_handler_registry.register(LOOPBACK_RDZV, _create_loopback_handler)
