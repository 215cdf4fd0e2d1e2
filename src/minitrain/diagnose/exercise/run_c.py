"""Train MiniGPT with DDP; each rank keeps a running record of its weights' norms for a plot."""

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.faults import VOCAB, batch
from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

STEPS = 6


def weight_norms(model: torch.nn.Module, samples: int) -> list[float]:
    norms = []
    for p in model.parameters():
        for _ in range(samples):
            norms.append(torch.linalg.matrix_norm(p.detach().reshape(p.shape[0], -1), ord=2).item())
    return norms


def main() -> None:
    with diagnosed() as tools:
        torch.manual_seed(0)
        model = DDP(build_minigpt(VOCAB, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        history = []
        for step in range(STEPS):
            tools.step(step)
            loss = model(batch(tools.rank, step)).loss
            optimizer.zero_grad()
            if tools.rank == 1:
                history.append(weight_norms(model.module, samples=40))
            loss.backward()
            optimizer.step()
        print(f"rank {tools.rank}: {STEPS} steps, last loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
