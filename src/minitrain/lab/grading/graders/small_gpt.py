"""What notebooks 18 and 19's graders share: a small MiniGPT's batches, SGD with momentum, and one process on the whole
batch, which the ranks' weights must equal within TOLERANCE. SGD, not AdamW: Adam's update hardly changes when every
gradient is scaled by one number, so a sum where the average is asked would pass under it."""

import torch

VOCAB, BATCH, LENGTH, STEPS = 64, 6, 16, 2
SGD = {"lr": 0.1, "momentum": 0.9}
TOLERANCE = 1e-5  # float32 rounding of an average over 2 or 3 ranks, after 2 SGD steps: about 1e-7 here


def batch(step: int, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s share (of n) of step `step`'s batch: inputs and targets."""
    tokens = torch.randint(VOCAB, (BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(step)).chunk(n)[rank]
    return tokens[:, :-1], tokens[:, 1:]


def flat(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter of `model`, flattened in order, into one tensor."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def one_process(model: torch.nn.Module, n: int) -> list[float]:
    """`model`'s weights after STEPS steps of SGD on each step's whole batch (its n shares, in order)."""
    optimizer = torch.optim.SGD(model.parameters(), **SGD)
    for step in range(STEPS):
        x, y = (torch.cat(parts) for parts in zip(*(batch(step, r, n) for r in range(n))))
        optimizer.zero_grad(set_to_none=True)
        model((x, y)).loss.backward()
        optimizer.step()
    return flat(model).tolist()
