"""Start distributed runs from Python and notebooks: the lab's loopback-only torchrun (Linux, macOS),
the spawn launcher (also Windows), streaming a run into a cell, and the processes and sockets a run
holds."""

from minitrain.launch.processes import alive, listening_sockets, process_tree
from minitrain.launch.rendezvous import free_port, loopback_store
from minitrain.launch.spawn import fast_start_method, ranks_json, spawn_workers, start_processes
from minitrain.launch.stream import LaunchError, run_streaming, stop_process_tree
from minitrain.launch.torchrun import TorchrunUnavailable, main, preferred_launcher, torchrun_command
from minitrain.launch.warm import run_ranks

__all__ = ["LaunchError", "TorchrunUnavailable", "alive", "fast_start_method", "free_port", "listening_sockets",
           "loopback_store", "main", "preferred_launcher", "process_tree", "ranks_json", "run_ranks", "run_streaming", "spawn_workers",
           "start_processes", "stop_process_tree", "torchrun_command"]
