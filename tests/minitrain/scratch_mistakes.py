"""The mistakes notebook 15's grader names, each a small change to the reference classes
(a module, so the grader's spawned workers import them by name)."""

import torch
import torch.distributed as dist
import torch.nn as nn

from minitrain.scratch_ddp import MIB, BucketedDDP, NaiveDDP, OverlappedDDP, trained_parameters


class NoBroadcast(NaiveDDP):
    """Each rank keeps its own initial weights."""

    def __init__(self, module: nn.Module) -> None:
        nn.Module.__init__(self)
        self.module, self.world_size = module, dist.get_world_size()


class NoDivision(NaiveDDP):
    """Sums the gradients instead of averaging them."""

    def finish(self) -> None:
        for p in self.module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)


class WaitsOnTheSpot(OverlappedDDP):
    """Waits for each all-reduce inside the hook: right gradients, no overlap."""

    def _launch(self, p: nn.Parameter) -> None:
        p.grad.div_(self.world_size)
        dist.all_reduce(p.grad, async_op=True).wait()


def every_occurrence(module: nn.Module) -> list[nn.Parameter]:
    """The parameters module by module: a tied weight (MiniGPT's tok_emb.weight, head.weight) twice."""
    return [p for m in module.modules() for p in m.parameters(recurse=False)]


class _Rebucketed(BucketedDDP):
    """The reference with its buckets made again from another list of parameters (the hooks stay its own)."""

    def rebucket(self, params: list[nn.Parameter], bucket_cap_mb: float) -> None:
        self.buckets, size = [], 0
        for p in params:
            if not self.buckets or (size + p.numel() * p.element_size() > bucket_cap_mb * MIB and self.buckets[-1]):
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {p: bucket for bucket in self.buckets for p in bucket}
        self.waiting = {id(bucket): len(bucket) for bucket in self.buckets}


class ForwardBuckets(_Rebucketed):
    """Groups the parameters in model order: the first bucket waits for the last gradient backward makes."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module, bucket_cap_mb)
        self.rebucket(list(module.parameters()), bucket_cap_mb)


class TiedCountedTwice(_Rebucketed):
    """Buckets the parameters module by module: a bucket holding the tied weight twice waits for two of its
    hooks, and one fires; finish() flushes it (the tied gradient summed twice over)."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module, bucket_cap_mb)
        self.rebucket(every_occurrence(module)[::-1], bucket_cap_mb)


class TiedDoubleAdded(TiedCountedTwice):
    """As TiedCountedTwice, with a hook per occurrence: the bucket is launched in backward, the tied weight's
    gradient in it twice."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module, bucket_cap_mb)
        seen = set()
        for p in every_occurrence(module):
            if p in seen:
                p.register_post_accumulate_grad_hook(self._ready)
            seen.add(p)


class HookedTwice(OverlappedDDP):
    """Hooks the parameters module by module: the tied weight gets two hooks, its gradient two all-reduces."""

    def __init__(self, module: nn.Module) -> None:
        NaiveDDP.__init__(self, module)
        self.works = []
        for p in every_occurrence(module):
            p.register_post_accumulate_grad_hook(self._launch)


class NoBufferBroadcast(NaiveDDP):
    """Broadcasts the parameters only: a buffer keeps each rank's own value."""

    def __init__(self, module: nn.Module) -> None:
        nn.Module.__init__(self)
        self.module, self.world_size = module, dist.get_world_size()
        with torch.no_grad():
            for p in module.parameters():
                dist.broadcast(p, src=0)


class Unflushed(BucketedDDP):
    """Never launches its last bucket (the one holding the embeddings)."""

    def _launch(self, bucket: list[nn.Parameter]) -> None:
        if bucket is self.buckets[-1]:
            self.waiting[id(bucket)] = 0
            return
        super()._launch(bucket)


class CountersNeverReset(BucketedDDP):
    """Sets its readiness counters once, in __init__: at step 0 each bucket launches in backward; from step 1 the
    counters are past zero, so no hook launches anything and finish() launches every bucket after backward."""

    def finish(self) -> None:
        launched = {id(bucket) for bucket, _, _ in self.works}
        for bucket in self.buckets:
            if id(bucket) not in launched:
                self._launch(bucket)
        for bucket, flat, work in self.works:
            work.wait()
            for p, average in zip(bucket, flat.split([p.numel() for p in bucket])):
                if p.grad is not None:
                    p.grad.copy_(average.view_as(p))
        self.works.clear()  # the counters, self.waiting, are not reset


class MismatchedShapes(NaiveDDP):
    """Rank 1 all-reduces each gradient with one element more: gloo aborts the rank that receives too much."""

    def finish(self) -> None:
        for p in self.module.parameters():
            extra = torch.zeros(dist.get_rank())  # rank 0: none; rank 1: one
            dist.all_reduce(torch.cat([p.grad.reshape(-1), extra]))  # mismatch: the ranks' shapes differ


class AverageOp(NaiveDDP):
    """A GPU tutorial's habit: NCCL's ReduceOp.AVG, which gloo does not have."""

    def finish(self) -> None:
        for p in self.module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


class TensorHook(OverlappedDDP):
    """Hooks each parameter with register_hook, which runs before the gradient is accumulated into p.grad."""

    def __init__(self, module: nn.Module) -> None:
        NaiveDDP.__init__(self, module)
        self.works = []
        for p in trained_parameters(module):
            p.register_hook(lambda grad, p=p: self._launch(p))


class AveragedWeights(NaiveDDP):
    """Averages the weights after backward instead of the gradients: each rank steps with its own gradient."""

    def finish(self) -> None:
        with torch.no_grad():
            for p in self.module.parameters():
                p.div_(self.world_size)
                dist.all_reduce(p)


class CudaSynchronize(OverlappedDDP):
    """A GPU tutorial's habit: torch.cuda.synchronize() to wait for the all-reduces."""

    def finish(self) -> None:
        torch.cuda.synchronize()
        self.works.clear()
