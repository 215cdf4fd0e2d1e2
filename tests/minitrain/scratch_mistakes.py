"""The five mistakes notebook 15's grader names, each a small change to the reference classes
(a module, so the grader's spawned workers import them by name)."""

import torch.distributed as dist
import torch.nn as nn

from minitrain.scratch_ddp import MIB, BucketedDDP, NaiveDDP, OverlappedDDP


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


class ForwardBuckets(BucketedDDP):
    """Groups the parameters in model order: the first bucket waits for the last gradient backward makes."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module, bucket_cap_mb)
        self.buckets, size = [], 0
        for p in module.parameters():
            if not self.buckets or (size + p.numel() * p.element_size() > bucket_cap_mb * MIB and self.buckets[-1]):
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {p: bucket for bucket in self.buckets for p in bucket}
        self.waiting = {id(bucket): len(bucket) for bucket in self.buckets}


class Unflushed(BucketedDDP):
    """Never launches its last bucket (the one holding the embeddings)."""

    def _launch(self, bucket: list[nn.Parameter]) -> None:
        if bucket is self.buckets[-1]:
            self.waiting[id(bucket)] = 0
            return
        super()._launch(bucket)
