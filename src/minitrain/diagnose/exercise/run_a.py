"""Train MiniGPT with DDP; rank 0 checks the validation loss every other step and tells every rank whether to stop."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.faults import VOCAB, batch
from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

STEPS = 8


def validation_loss(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return model(batch(99, 0)).loss.item()


def main() -> None:
    with diagnosed() as tools:
        torch.manual_seed(0)
        model = DDP(build_minigpt(VOCAB, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        stop = torch.zeros(1)
        for step in range(STEPS):
            tools.step(step)
            loss = model(batch(tools.rank, step)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if tools.rank == 0 and step % 2 == 1:
                stop[0] = float(validation_loss(model.module) < 1.0)
                dist.broadcast(stop, src=0)
            if stop.item():
                break
        print(f"rank {tools.rank}: {step + 1} steps, last loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
