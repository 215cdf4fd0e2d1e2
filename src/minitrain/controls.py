"""train.py's control flags: runs in which DDP does not average, to see what the all-reduce does.
`--comm noop` keeps DDP but swaps its all-reduce for PyTorch's no-op comm hook; `--no-sync` runs every
backward under `model.no_sync()` (no all-reduce at all); `--track-drift` logs how far each step's
weights are from rank 0's."""

import argparse
import contextlib

import torch
import torch.distributed as dist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--comm", choices=["allreduce", "noop"], default="allreduce",
                        help="noop: DDP's no-op comm hook, gradients are never averaged (a control)")
    parser.add_argument("--no-sync", action="store_true",
                        help="every backward under model.no_sync(): no all-reduce at all (a control)")
    parser.add_argument("--track-drift", action="store_true",
                        help="log each step's largest parameter difference from rank 0")


def maybe_no_sync(ddp_model, no_sync: bool) -> contextlib.AbstractContextManager:
    """DDP's no_sync() context with --no-sync, else a context that does nothing."""
    return ddp_model.no_sync() if no_sync else contextlib.nullcontext()


def drift(model: torch.nn.Module, track: bool) -> dict[str, float]:
    """With --track-drift, {"max_param_diff": largest |this rank's parameter - rank 0's|} (a collective
    every rank calls); else {}."""
    if not track:
        return {}
    mine = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    diff = (mine - rank0).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return {"max_param_diff": diff.item()}
