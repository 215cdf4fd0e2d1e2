"""Start distributed runs from Python and notebooks: the lab's loopback-only torchrun, the spawn
launcher, streaming a run into a cell, and the processes and sockets a run holds."""

from minitrain.launch.processes import Listener, alive, listening_sockets, process_tree
from minitrain.launch.rendezvous import (LoopbackRendezvousHandler, PortInUseError, free_port,
                                         loopback_store)
from minitrain.launch.spawn import spawn_workers
from minitrain.launch.stream import LaunchError, run_streaming, stop_process_tree
from minitrain.launch.torchrun import describe_failures, main, torchrun_command

__all__ = ["LaunchError", "Listener", "LoopbackRendezvousHandler", "PortInUseError", "alive",
           "describe_failures", "free_port", "listening_sockets", "loopback_store", "main",
           "process_tree", "run_streaming", "spawn_workers", "stop_process_tree", "torchrun_command"]
