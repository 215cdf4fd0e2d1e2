"""A sharded optimizer (notebook 18), as ZeRO's first stage and torch's ZeroRedundancyOptimizer: every rank keeps the
whole model and its gradients, but steps, and keeps optimizer state for, only the parameters it owns. A step: the
gradients averaged with a reduce-scatter (each rank receives only its own parameters' average), each rank steps its
own parameters, then every rank gets every updated parameter (an all-gather, or a broadcast from each owner).
"""

from collections.abc import Iterable

import torch
import torch.distributed as dist


class ShardedOptimizer(torch.optim.Optimizer):
    """ShardedOptimizer(params, optimizer_cls, **kwargs), as torch's ZeroRedundancyOptimizer(params,
    optimizer_class, **kwargs): a torch.optim.Optimizer over `params` whose step() steps only this rank's own
    parameters, then leaves every rank holding every updated parameter (bit for bit the same on every rank).

    The contract the grader checks, on 2 and 3 real ranks, with other optimizers than AdamW:
    - `params` may be a generator: it can be read once only.
    - A tensor listed twice (a weight tied between two modules, listed from each) is one parameter, stepped once.
    - A parameter with requires_grad=False is left out: never stepped, never sent.
    - Every other parameter is owned by exactly one rank, also when the parameters do not divide evenly among the
      ranks. Ranks own whole parameters, balanced by elements, not by count: the rank owning the most elements may
      own at most the total / world size plus the largest parameter's size (giving each parameter, largest first,
      to the rank owning the fewest elements so far keeps within that).
    - `self.optimizer` is `optimizer_cls(<this rank's own parameters>, **kwargs)`, built here, and holds the only
      optimizer state of this rank: the grader sums its `state`'s tensors and fails a rank that holds more than its
      share (the whole model's state on every rank saves no memory).
    - average_gradients() then step() is the step after backward; step() uses the .grad of this rank's own
      parameters as average_gradients() left them.
    Needs a process group (dist.get_rank raises torch's own error without one)."""

    def __init__(self, params: Iterable[torch.Tensor], optimizer_cls: type[torch.optim.Optimizer], **kwargs) -> None:
        ### BEGIN SOLUTION: ShardedOptimizer: this rank's own parameters, and an optimizer_cls over them alone
        unique = list(dict.fromkeys(p for p in params if p.requires_grad))  # read once; a tied weight once
        super().__init__(unique, kwargs)
        self.rank, n = dist.get_rank(), dist.get_world_size()
        loads = [0] * n  # elements owned so far: each parameter goes to the least loaded rank
        self.placed = []  # (parameter, its owner, where it starts in the owner's segment of the flat buffers)
        for p in sorted(unique, key=lambda p: -p.numel()):  # the largest first: the parts end more even
            owner = loads.index(min(loads))
            self.placed.append((p, owner, loads[owner]))
            loads[owner] += p.numel()
        self.segment = max(loads)  # each rank's segment of the flat buffers, padded to the largest
        self.optimizer = optimizer_cls([p for p, owner, _ in self.placed if owner == self.rank], **kwargs)
        ### END SOLUTION

    @torch.no_grad()
    def average_gradients(self) -> None:
        """After backward, before step(): the .grad of each parameter this rank owns becomes its average over every
        rank (their sum divided by the world size), with one reduce-scatter, so that each rank receives only its own
        parameters' average; the others' .grad may be left as they are."""
        ### BEGIN SOLUTION: ShardedOptimizer.average_gradients: one reduce-scatter
        n = dist.get_world_size()
        flat = torch.zeros(n * self.segment)  # segment k: rank k's parameters' gradients
        for p, owner, offset in self.placed:
            if p.grad is not None:
                start = owner * self.segment + offset
                flat[start:start + p.numel()] = p.grad.reshape(-1)
        mine = torch.empty(self.segment)
        dist.reduce_scatter_single(mine, flat)  # the sum of every rank's segment `rank`, on this rank only
        mine /= n
        for p, owner, offset in self.placed:
            if owner == self.rank:
                p.grad = mine[offset:offset + p.numel()].view_as(p).clone()
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        """Step this rank's own parameters with self.optimizer, then give every rank every updated parameter."""
        ### BEGIN SOLUTION: ShardedOptimizer.step: step your own parameters, then share them
        self.optimizer.step()
        mine = torch.zeros(self.segment)
        for p, owner, offset in self.placed:
            if owner == self.rank:
                mine[offset:offset + p.numel()] = p.reshape(-1)
        everyone = torch.empty(dist.get_world_size() * self.segment)
        dist.all_gather_single(everyone, mine)  # segment k: rank k's updated parameters
        for p, owner, offset in self.placed:
            start = owner * self.segment + offset
            p.copy_(everyone[start:start + p.numel()].view_as(p))
        ### END SOLUTION
