"""The small fixture two graders share (the comm hook's and BarrierTimer's runs, Block A's): a tiny float64 model,
a fixed batch of 12 rows, and one process's gradients on that whole batch, which DDP's averaged ones must equal."""

import torch

GRAD_ATOL = 1e-10  # float64: only the summation order differs from one process on the whole batch


def tiny_model() -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state alone
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


def fixed_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)  # 12 rows: equal halves and thirds
    return torch.randn(12, 6, generator=g, dtype=torch.float64), torch.randn(12, 3, generator=g, dtype=torch.float64)


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    """Each parameter's gradient by name (None where it has none), copied."""
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def reference_gradients() -> dict[str, torch.Tensor]:
    """One process, the whole batch: what DDP's averaged gradients must equal."""
    model = tiny_model()
    inputs, targets = fixed_batch()
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    return gradients(model)


def max_diff(a: dict, b: dict, scale: float = 1.0) -> float:
    """The largest |a - scale * b| over the gradients of two `gradients` dicts."""
    return max((a[k] - scale * b[k]).abs().max().item() for k in a)
