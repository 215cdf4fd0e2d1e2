"""Train MiniGPT on sequences until it is good enough: evaluate every few steps, stop once the validation loss
is below TARGET, or after MAX_STEPS.

    python -m minitrain.launch --nproc-per-node=2 run_c.py

Rank 0 logs, keeps the best checkpoint and the history of evaluations.
"""

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

SEED = int(os.environ.get("SEED", "3"))  # the data and the initial weights
VOCAB, BLOCK = 32, 16
N_TRAIN, N_VAL = 256, 16
GLOBAL_BATCH = 8  # sequences per step, over every rank
MAX_STEPS, EVAL_EVERY = 40, 4
TARGET = 3.25  # validation loss at which the model is good enough
LR = 0.003


def sequences(n: int, g: torch.Generator) -> torch.Tensor:
    """n sequences of BLOCK + 1 tokens: each repeats a random motif of 2 to 5 tokens, with some noise."""
    out = torch.empty(n, BLOCK + 1, dtype=torch.long)
    for i in range(n):
        motif = torch.randint(0, VOCAB, (int(torch.randint(2, 6, (), generator=g)),), generator=g)
        row = motif.repeat(BLOCK // len(motif) + 2)[:BLOCK + 1]
        noise = torch.rand(BLOCK + 1, generator=g) < 0.1
        out[i] = torch.where(noise, torch.randint(0, VOCAB, (BLOCK + 1,), generator=g), row)
    return out


@torch.no_grad()
def validation_loss(model: DDP, val: torch.Tensor) -> float:
    model.eval()
    loss = model.module((val[:, :-1], val[:, 1:])).loss.item()
    model.train()
    return loss


class Checkpoints:
    """Rank 0's best checkpoint so far, and the history of evaluations."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.best, self.history = folder, float("inf"), []

    def update(self, model: DDP, optimizer: torch.optim.Optimizer, step: int, val_loss: float) -> None:
        self.history.append({"step": step, "val_loss": round(val_loss, 5)})
        if val_loss < self.best:
            self.best = val_loss
            path = self.folder / "checkpoint.pt"
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                        "loss": val_loss}, path.with_suffix(".tmp"))
            path.with_suffix(".tmp").rename(path)

    def write_history(self) -> None:
        (self.folder / "history.json").write_text(json.dumps(self.history))


def main() -> None:
    with diagnosed() as tools:
        rank, world = dist.get_rank(), dist.get_world_size()
        g = torch.Generator().manual_seed(SEED)
        train, val = sequences(N_TRAIN, g), sequences(N_VAL, g)
        my_train, my_val = train[rank::world], val[rank::world]
        per_rank = GLOBAL_BATCH // world
        torch.manual_seed(SEED)
        model = DDP(build_minigpt(VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        checkpoints = Checkpoints(tools.out or Path(".")) if rank == 0 else None
        started = time.time()
        for step in range(MAX_STEPS):
            tools.step(step)
            first = (step * per_rank) % len(my_train)
            batch = my_train[first:first + per_rank]
            loss = model((batch[:, :-1], batch[:, 1:])).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if (step + 1) % EVAL_EVERY:
                continue
            val_loss = validation_loss(model, my_val)
            if rank == 0:
                print(f"step {step}: loss {loss.item():.3f}, validation {val_loss:.3f} "
                      f"({time.time() - started:.1f} s)", flush=True)
                checkpoints.update(model, optimizer, step + 1, val_loss)
            if val_loss < TARGET:
                break
        if rank == 0:
            checkpoints.write_history()
            print(f"done: {step + 1} steps, best validation loss {checkpoints.best:.4f}", flush=True)
        dist.barrier()


if __name__ == "__main__":
    main()
