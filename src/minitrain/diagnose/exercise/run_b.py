"""Train MiniGPT with DDP, and count how often each token appears in the targets, summed over the ranks."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.faults import VOCAB, batch
from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

STEPS = 6


def main() -> None:
    with diagnosed() as tools:
        torch.manual_seed(0)
        model = DDP(build_minigpt(VOCAB, block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(STEPS):
            tools.step(step)
            x, y = batch(tools.rank, step)
            x, y = x % (VOCAB - 8 * tools.rank), y % (VOCAB - 8 * tools.rank)  # each rank's shard of the vocabulary
            loss = model((x, y)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step == STEPS - 1:
                counts = torch.bincount(y.reshape(-1))
                dist.all_reduce(counts)
                print(f"rank {tools.rank}: token counts {counts.tolist()[:8]} ...", flush=True)


if __name__ == "__main__":
    main()
