"""DDP written from scratch in three levels (notebook 15): naive, overlapped, bucketed.

Each wraps a model the same way, so one loop drives any of them (and torch's DDP):

    model = BucketedDDP(model)           # or NaiveDDP, OverlappedDDP
    loss = model(batch).loss
    loss.backward()                      # the overlapped levels launch their all-reduces in here
    model.finish()                       # every gradient now holds the average over the ranks
    optimizer.step()

The average: divide each gradient by the world size, then all-reduce it (a sum): torch DDP's order (it
multiplies by 1/world_size, the same bits at 2 ranks). Summing first and dividing after is accepted too: at 2 ranks
both give DDP's bits; at 3 the grader allows the rounding bound notebook 15 derives. Hooks and buckets last across
steps; what belongs to one step (the works to wait for, which gradients and buckets are ready or launched) starts
afresh each step: the grader checks every step.
"""

import torch
import torch.distributed as dist
import torch.nn as nn

MIB = 2**20  # bucket_cap_mb counts MiB, as DDP's does


def trained_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters that get gradients, in model order; a tied weight once (parameters() dedupes by identity)."""
    return [p for p in module.parameters() if p.requires_grad]


class NaiveDDP(nn.Module):
    """Level 1: broadcast rank 0's parameters and buffers once (torch's DDP broadcasts buffers before every forward
    too, which only a buffer that forward changes needs); after backward, all-reduce every gradient, one by one."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        ### BEGIN SOLUTION: NaiveDDP: broadcast rank 0's parameters and buffers
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, src=0)  # in place: every rank now starts from rank 0's weights
        ### END SOLUTION

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish(self) -> None:
        """After loss.backward(): every gradient becomes its average over the ranks."""
        ### BEGIN SOLUTION: NaiveDDP: divide every gradient by the world size, then all-reduce it
        for p in trained_parameters(self.module):
            if p.grad is not None:  # unused on every rank (as the grader's case): no gradient to share
                p.grad.div_(self.world_size)  # divide first, then sum: torch DDP's order of operations
                dist.all_reduce(p.grad)
        ### END SOLUTION


class OverlappedDDP(NaiveDDP):
    """Level 2: one asynchronous all-reduce per gradient, launched by autograd as soon as it is ready."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__(module)  # the broadcast of level 1
        self.works: list[dist.Work] = []
        ### BEGIN SOLUTION: OverlappedDDP: register a hook on every parameter
        for p in trained_parameters(module):
            p.register_post_accumulate_grad_hook(self._launch)  # runs inside backward, once p.grad is final
        ### END SOLUTION

    def _launch(self, p: nn.Parameter) -> None:
        """The hook: start p.grad's all-reduce and return at once, while backward goes on."""
        ### BEGIN SOLUTION: OverlappedDDP: launch an asynchronous all-reduce from the hook
        p.grad.div_(self.world_size)
        self.works.append(dist.all_reduce(p.grad, async_op=True))  # no wait here: that would stop backward
        ### END SOLUTION

    def finish(self) -> None:
        """Wait for every all-reduce launched during backward, before the optimizer reads the gradients."""
        ### BEGIN SOLUTION: OverlappedDDP: wait for every launched all-reduce
        for work in self.works:
            work.wait()
        self.works.clear()
        ### END SOLUTION


class BucketedDDP(NaiveDDP):
    """Level 3: buckets of at most bucket_cap_mb MiB (a larger parameter alone; DDP's close-at-the-cap rule passes too)
    in reverse model order; one flat asynchronous all-reduce per bucket once all of it is ready, in readiness order."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module)  # the broadcast of level 1
        self.buckets: list[list[nn.Parameter]] = []
        self.works: list[tuple[list[nn.Parameter], torch.Tensor, dist.Work]] = []
        ### BEGIN SOLUTION: BucketedDDP: group the parameters into buckets and register the hooks
        cap, size = bucket_cap_mb * MIB, 0
        for p in reversed(trained_parameters(module)):
            nbytes = p.numel() * p.element_size()
            if not self.buckets or (size + nbytes > cap and self.buckets[-1]):  # a parameter over the cap: alone
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
        self.bucket_of = {p: bucket for bucket in self.buckets for p in bucket}  # Parameters hash by identity
        self.waiting = {id(bucket): len(bucket) for bucket in self.buckets}
        for p in self.bucket_of:
            p.register_post_accumulate_grad_hook(self._ready)
        ### END SOLUTION

    def _ready(self, p: nn.Parameter) -> None:
        """The hook: count p as ready; launch its bucket once every gradient in it is."""
        ### BEGIN SOLUTION: BucketedDDP: launch a bucket once all of its gradients are ready
        bucket = self.bucket_of[p]
        self.waiting[id(bucket)] -= 1
        if self.waiting[id(bucket)] == 0:
            self._launch(bucket)
        ### END SOLUTION

    def _launch(self, bucket: list[nn.Parameter]) -> None:
        """One flat asynchronous all-reduce of the bucket's gradients (zeros for a parameter without one)."""
        ### BEGIN SOLUTION: BucketedDDP: flatten a bucket and launch its all-reduce
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
        flat.div_(self.world_size)
        self.works.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
        self.waiting[id(bucket)] = 0  # launched: finish() flushes only the buckets still waiting
        ### END SOLUTION

    def finish(self) -> None:
        """Flush the buckets a parameter without gradient kept waiting, wait for every bucket, copy back; reset the
        step's state for the next backward."""
        ### BEGIN SOLUTION: BucketedDDP: flush, wait, copy the averages back into the gradients
        for bucket in self.buckets:  # same buckets everywhere; a parameter unused on some ranks only is not handled
            if self.waiting[id(bucket)] > 0:
                self._launch(bucket)
        for bucket, flat, work in self.works:
            work.wait()
            for p, average in zip(bucket, flat.split([p.numel() for p in bucket])):
                if p.grad is not None:  # no gradient on any rank (the grader's unused parameter): DDP leaves None
                    p.grad.copy_(average.view_as(p))
        self.works.clear()
        self.waiting = {id(bucket): len(bucket) for bucket in self.buckets}
        ### END SOLUTION
