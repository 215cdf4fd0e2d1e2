"""Notebook 15's grader, its small parts: the recorder of the learner's all-reduces, the buckets a cap makes,
and the small models that break naive DDP code (an unused layer beside a buffer, a tied weight), each run
on a rank of a real gloo group beside torch's DistributedDataParallel (from_scratch drives them).

Buffers: a level broadcasts rank 0's buffers once, in __init__, as it does the parameters. torch's DDP
(broadcast_buffers=True) broadcasts them again before every forward, which matters only for a buffer that
forward changes (BatchNorm's running statistics); the levels do not, and the grader's buffer is constant.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from minitrain.lab.grading.graders.running import ExerciseError

CAP_MB = 0.25  # BucketedDDP's cap in the main run: MiniGPT's 1.1 MB of gradients in several buckets


class AllReduceRecorder:
    """Every dist.all_reduce the learner's code calls: its size, whether backward was running, and when
    its work was waited for (a proxy notes wait(), get_future().wait() and value())."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.in_backward = False
        self._real = dist.all_reduce
        dist.all_reduce = self._all_reduce

    def close(self) -> None:
        dist.all_reduce = self._real

    @contextmanager
    def backward(self) -> Iterator[None]:
        """Around loss.backward(): the all-reduces called in it count as launched (or waited) in backward."""
        self.in_backward = True
        try:
            yield
        finally:
            self.in_backward = False

    def _all_reduce(self, tensor: torch.Tensor, *args, async_op: bool = False, **kwargs):
        call = {"numel": tensor.numel(), "in_backward": self.in_backward, "waited": None}
        self.calls.append(call)
        work = self._real(tensor, *args, async_op=async_op, **kwargs)
        if not async_op:
            call["waited"] = self._when()
            return work
        return _Waited(work, lambda: call.update(waited=call["waited"] or self._when()))

    def _when(self) -> str:
        return "backward" if self.in_backward else "after"


class _Waited:
    """A work or future that notes the first time someone waits for it."""

    def __init__(self, inner, note: Callable[[], None]) -> None:
        self._inner, self._note = inner, note

    def wait(self, *args, **kwargs):
        self._note()
        return self._inner.wait(*args, **kwargs)

    def value(self):
        self._note()
        return self._inner.value()

    def get_future(self):
        return _Waited(self._inner.get_future(), self._note)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def wrapper(cls: type, level: str, cap_mb: float = CAP_MB) -> Callable[[nn.Module], nn.Module]:
    """How the grader wraps a model in the learner's class: BucketedDDP with a cap, the others as they are."""
    return lambda model: cls(model, bucket_cap_mb=cap_mb) if level == "bucketed" else cls(model)


def grads_of(model: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def occurrences(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter as each module lists it, in model order: a tied weight twice."""
    return [p for _, p in model.named_parameters(remove_duplicate=False)]


def bucket_numels(params: list[nn.Parameter], cap_mb: float) -> set[tuple[int, ...]]:
    """The bucket sizes (elements, sorted) `params` make under a cap, closing a bucket before it would pass the
    cap or (DDP's own rule) once it reaches it: either rule is right."""
    found = set()
    for close_after in (False, True):
        buckets, size = [[]], 0
        for p in params:
            nbytes = p.numel() * p.element_size()
            if buckets[-1] and not close_after and size + nbytes > cap_mb * 2**20:
                buckets, size = buckets + [[]], 0
            buckets[-1].append(p.numel())
            size += nbytes
            if close_after and size >= cap_mb * 2**20:
                buckets, size = buckets + [[]], 0
        found.add(tuple(sorted(sum(b) for b in buckets if b)))
    return found


def check_each_gradient_once(level: str, calls: list[dict], model: nn.Module, cap_mb: float) -> None:
    """One step's all-reduces, `model`'s parameters all with a gradient: overlapped, one per distinct parameter;
    bucketed, no tied weight twice in the buckets. Checked before the gradients, which two all-reduces of one
    gradient garble (the second divides a tensor the first may still be summing)."""
    params, twice = list(model.parameters()), occurrences(model)
    if level == "overlapped" and calls and len(calls) != len(params):
        if len(calls) > len(params):
            raise ExerciseError(f"a tied weight hooked twice: {len(calls)} all-reduces per step for {len(params)} "
                                "parameters; hook each parameter of module.parameters() once (it lists a tied weight "
                                "once; module by module it comes twice, and two hooks divide and all-reduce one "
                                "gradient)")
        raise ExerciseError(f"{len(calls)} all-reduce(s) per step for {len(params)} parameters with gradients: hook "
                            "every parameter, one all-reduce each")
    got = tuple(sorted(c["numel"] for c in calls))
    if (level == "bucketed" and len(twice) > len(params) and got in bucket_numels(twice[::-1], cap_mb)
            and got not in bucket_numels(params[::-1], cap_mb)):
        raise ExerciseError(f"a tied weight counted twice: the all-reduces have sizes {list(got)}, the buckets of the "
                            "parameters as each module lists them; bucket module.parameters() (a tied weight once): "
                            "counted twice, its bucket waits for a second gradient that never comes, or sums it twice")


class _WithUnused(nn.Module):
    """Three layers, the middle one never used (no gradient on any rank), and a buffer each rank sets its own."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.unused, self.b = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
        self.register_buffer("scale", torch.full((4,), 1.0 + rank))  # rank 0's after the broadcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x * self.scale))).square().mean()


class _Tied(nn.Module):
    """Three layers, the first two sharing one weight (as MiniGPT's tok_emb and head): one Parameter, two names."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x))))).square().mean()


def _one_step(wrap: Callable[[nn.Module], nn.Module], model: nn.Module, rank: int,
              recorder: AllReduceRecorder | None = None) -> tuple[nn.Module, list]:
    """One backward of the wrapped `model` on this rank's batch, finish() after: the model and its gradients."""
    wrapped = wrap(model)
    torch.manual_seed(1 + rank)
    loss = wrapped(torch.randn(5, 4))
    with recorder.backward() if recorder else nullcontext():
        loss.backward()
    getattr(wrapped, "finish", lambda: None)()
    return model, grads_of(model)


def _against_ddp(cls: type, level: str, make: Callable[[], nn.Module], rank: int,
                 **ddp) -> tuple[nn.Module, list, list, list]:
    """A `make()` model stepped once wrapped in the learner's class, another in DDP: (the learner's model, its
    gradients, DDP's, the learner's all-reduces)."""
    recorder = AllReduceRecorder()
    try:
        model, got = _one_step(wrapper(cls, level), make(), rank, recorder)
    finally:
        recorder.close()
    _, want = _one_step(lambda m: DistributedDataParallel(m, **ddp), make(), rank)
    return model, got, want, recorder.calls


def buffer_case(cls: type, level: str, rank: int) -> None:
    """The small model with a buffer each rank sets its own: after wrapping, rank 0's on every rank. Its own
    case, before the gradients (which a rank's own buffer changes on the other ranks, not on rank 0)."""
    model = _WithUnused(rank)
    wrapper(cls, level)(model)
    if not torch.equal(model.scale, _WithUnused(0).scale):
        raise ExerciseError("buffers not broadcast: after wrapping, a small model's buffer `scale` is not rank 0's on "
                            "this rank; broadcast every buffer (module.buffers()) from rank 0 in __init__, as the "
                            "parameters")


def unused_case(cls: type, level: str, rank: int) -> None:
    """The model with an unused layer (and the buffer), against DDP(find_unused_parameters=True)."""
    model, got, want, _ = _against_ddp(cls, level, lambda: _WithUnused(rank), rank, find_unused_parameters=True)
    for (name, _), mine, ddp in zip(model.named_parameters(), got, want):
        if (mine is None) != (ddp is None) or (mine is not None and not torch.allclose(mine, ddp, rtol=1e-6,
                                                                                        atol=1e-9)):
            if ddp is None:
                raise ExerciseError(f"a parameter without gradient: {name}, which no loss uses, got a gradient after "
                                    "finish(); torch DDP leaves it None")
            raise ExerciseError(f"a parameter without gradient (the 'unused' layer of a small model) left {name}'s "
                                "gradient unaveraged: a bucket it keeps waiting must still be all-reduced in finish()")


def tied_case(cls: type, level: str, rank: int) -> None:
    """The model with a tied weight (one bucket at the cap: the weight would be in it twice), against DDP."""
    model, got, want, calls = _against_ddp(cls, level, _Tied, rank)
    check_each_gradient_once(level, calls, model, CAP_MB)
    for (name, _), mine, ddp in zip(model.named_parameters(), got, want):
        if mine is None or not torch.allclose(mine, ddp, rtol=1e-6, atol=1e-9):
            raise ExerciseError(f"a tied weight (a small model's a.weight is b.weight): {name}'s gradient after "
                                "finish() is not torch DDP's")
