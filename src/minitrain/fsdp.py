"""A minimal FSDP (notebook 19): each rank keeps only a shard of every unit's parameters, gathers a unit's parameters
just before it computes (in forward, and again in backward), frees them after, and reduce-scatters the unit's
gradients so that each rank holds the averaged gradient of its own shard; an ordinary optimizer steps the shards.

A unit is one of MiniGPT's blocks, or the root: every parameter no block holds (the token embedding, tied to the
head, the position embedding, the final LayerNorm), gathered for the whole forward and the whole backward.
"""

import torch
import torch.distributed as dist
from torch import nn


class Unit:
    """One unit's own parameters, flattened into one buffer and cut into world-size equal shards.

    The contract the grader checks, on 2 and 3 real ranks:
    - `self.params`: the unit's parameters, in the order given; after __init__ each is a view of `self.full`.
    - `self.full`: the flat buffer of every parameter of the unit (padded at its end to a multiple of the world size);
      its storage holds 0 bytes whenever the unit is not gathered (free() resizes it to 0; gather() back).
    - `self.shard`: this rank's part of that buffer, an nn.Parameter of len(self.full) / world size elements (a
      copy, not a view): rank r's is elements [r * len, (r + 1) * len) of it. The shards together cover every
      element, also when the parameters' elements do not divide by the world size (pad, never drop).
    - After __init__ the unit is freed.
    Needs a process group."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        ### BEGIN SOLUTION: Unit: flatten, pad, keep your shard, make each parameter a view of the flat buffer
        self.params = params
        rank, n = dist.get_rank(), dist.get_world_size()
        total = sum(p.numel() for p in params)
        size = -(-total // n)  # the shard's length: rounded up, so that the last elements are not dropped
        self.full = torch.zeros(size * n)
        self.full[:total] = torch.cat([p.detach().reshape(-1) for p in params])
        self.shard = nn.Parameter(self.full[rank * size:(rank + 1) * size].clone())
        offset = 0
        for p in params:
            p.data = self.full[offset:offset + p.numel()].view_as(p)  # the module computes with views of `full`
            offset += p.numel()
        self.free()
        ### END SOLUTION

    def gather(self) -> None:
        """Give `self.full` its storage back, then fill it with every rank's shard (an all-gather)."""
        ### BEGIN SOLUTION: Unit.gather: storage back, then an all-gather
        self.full.untyped_storage().resize_(self.full.numel() * self.full.element_size())
        dist.all_gather_single(self.full, self.shard.detach())
        ### END SOLUTION

    def free(self) -> None:
        """Let go of the gathered parameters' memory: `self.full`'s storage resized to 0 bytes (the views stay)."""
        ### BEGIN SOLUTION: Unit.free: the storage resized to 0 bytes
        self.full.untyped_storage().resize_(0)
        ### END SOLUTION

    def reduce_gradients(self) -> None:
        """After backward: `self.shard.grad` becomes this rank's shard of the unit's gradients averaged over every rank
        (one reduce-scatter of the flat gradients, laid out as `self.full`), and each parameter's own .grad is let go
        (None), so that no rank keeps the whole unit's gradients. A parameter without a .grad counts as zeros."""
        ### BEGIN SOLUTION: Unit.reduce_gradients: one reduce-scatter, then the full gradients let go
        n = dist.get_world_size()
        flat = torch.zeros_like(self.shard.detach()).repeat(n)
        offset = 0
        for p in self.params:
            if p.grad is not None:
                flat[offset:offset + p.numel()] = p.grad.reshape(-1)
            p.grad = None
            offset += p.numel()
        mine = torch.empty_like(self.shard.detach())
        dist.reduce_scatter_single(mine, flat)
        self.shard.grad = mine / n
        ### END SOLUTION


def shard_model(model: nn.Module, optimizer_cls: type[torch.optim.Optimizer],
                **kwargs) -> tuple[list[Unit], torch.optim.Optimizer]:
    """MiniGPT `model` sharded: one Unit per block of `model.blocks` (its parameters), then the root's Unit (every
    parameter no block holds, each once: the tied tok_emb/head weight is one parameter, in one unit). Hooks gather a
    block's unit just before its forward and just before its backward, and free it just after each; the root's unit
    is gathered just before the model's forward and stays gathered until after_backward frees it. Returns the units,
    the root last, and `optimizer_cls(<every unit's shard>, **kwargs)`, built after the sharding."""
    ### BEGIN SOLUTION: shard_model: the units, their hooks, then the optimizer over the shards
    units, claimed = [], set()
    for block in model.blocks:
        unit = Unit([p for p in block.parameters() if id(p) not in claimed])
        claimed |= {id(p) for p in unit.params}
        block.register_forward_pre_hook(lambda module, args, unit=unit: unit.gather())
        block.register_forward_hook(lambda module, args, output, unit=unit: unit.free())
        block.register_full_backward_pre_hook(lambda module, grad_output, unit=unit: unit.gather())
        block.register_full_backward_hook(lambda module, grad_input, grad_output, unit=unit: unit.free())
        units.append(unit)
    root = Unit([p for p in model.parameters() if id(p) not in claimed])  # parameters() gives a tied weight once
    model.register_forward_pre_hook(lambda module, args: root.gather())
    units.append(root)
    return units, optimizer_cls([unit.shard for unit in units], **kwargs)
    ### END SOLUTION


def after_backward(units: list[Unit]) -> None:
    """After loss.backward(), before optimizer.step(): every unit's gradients reduce-scattered (reduce_gradients),
    and the root's unit, still gathered since forward, freed."""
    ### BEGIN SOLUTION: after_backward: each unit's gradients reduce-scattered, the root freed
    for unit in units:
        unit.reduce_gradients()
    units[-1].free()
    ### END SOLUTION
