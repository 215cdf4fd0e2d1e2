"""Pretrain MiniGPT on a corpus of documents packed into blocks, two epochs, evaluating after each.

    python -m minitrain.launch --nproc-per-node=2 run_b.py

Rank 0 logs and writes a checkpoint after each epoch.
"""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

DATA_SEED, MODEL_SEED = int(os.environ.get("SEED", "10")), 0
VOCAB, BLOCK = 40, 16
EOS = 0  # between documents
N_DOCS, N_VAL_BLOCKS = 60, 8
GLOBAL_BATCH = 4  # blocks per step, over every rank
EPOCHS = 2
LR = 0.05
LOG_EVERY = 5


def load_documents(seed: int) -> list[list[int]]:
    """N_DOCS documents of token ids 1..VOCAB-1, of random lengths: most short, some long."""
    g = torch.Generator().manual_seed(seed)
    lengths = (3 - 14 * torch.rand(N_DOCS, generator=g).log()).long().tolist()  # exponential, mean 17
    docs = []
    for n in lengths:
        start = int(torch.randint(1, VOCAB, (), generator=g))
        docs.append([(start + 3 * i) % (VOCAB - 1) + 1 for i in range(n)])  # a document: a walk of stride 3
    return docs


def pack(docs: list[list[int]], size: int) -> torch.Tensor:
    """The documents joined by EOS, cut into rows of `size` tokens (the tail that does not fill one dropped)."""
    stream = [t for doc in docs for t in doc + [EOS]]
    rows = len(stream) // size
    return torch.tensor(stream[:rows * size]).view(rows, size)


def validation_blocks() -> torch.Tensor:
    """Held-out blocks, the same on every rank."""
    g = torch.Generator().manual_seed(DATA_SEED + 1)
    starts = torch.randint(1, VOCAB, (N_VAL_BLOCKS, 1), generator=g)
    return (starts + 3 * torch.arange(BLOCK + 1)) % (VOCAB - 1) + 1


@torch.no_grad()
def evaluate(model: DDP, blocks: torch.Tensor, rank: int, world: int) -> float:
    """Mean loss on the validation blocks, each rank scoring its share of them."""
    model.eval()
    mine = blocks[rank::world]
    loss = model.module((mine[:, :-1], mine[:, 1:])).loss
    model.train()
    total = torch.tensor([loss.item() * len(mine), float(len(mine))])
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def save_checkpoint(model: DDP, optimizer: torch.optim.Optimizer, step: int, loss: float, folder: Path) -> None:
    path = folder / "checkpoint.pt"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "loss": loss}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def main() -> None:
    with diagnosed() as tools:
        rank, world = dist.get_rank(), dist.get_world_size()
        folder = tools.out or Path(".")
        docs = load_documents(DATA_SEED)
        order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(DATA_SEED))
        docs = [docs[i] for i in order.tolist()]
        blocks = pack(docs, BLOCK + 1)  # packed once, then shared out: every rank gets as many blocks
        blocks = blocks[:len(blocks) - len(blocks) % GLOBAL_BATCH][rank::world]
        val = validation_blocks()
        per_rank = GLOBAL_BATCH // world
        steps_per_epoch = len(blocks) // per_rank
        torch.manual_seed(MODEL_SEED)
        model = DDP(build_minigpt(VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        if rank == 0:
            print(f"{len(docs)} documents, {steps_per_epoch} steps per epoch, {world} ranks", flush=True)
        step, started = 0, time.time()
        for epoch in range(EPOCHS):
            for i in range(steps_per_epoch):
                tools.step(step)
                batch = blocks[i * per_rank:(i + 1) * per_rank]
                loss = model((batch[:, :-1], batch[:, 1:])).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if rank == 0 and step % LOG_EVERY == 0:
                    print(f"epoch {epoch} step {step}: loss {loss.item():.3f} ({time.time() - started:.1f} s)",
                          flush=True)
                step += 1
            val_loss = evaluate(model, val, rank, world)
            if rank == 0:
                print(f"epoch {epoch}: validation loss {val_loss:.4f}", flush=True)
                save_checkpoint(model, optimizer, step, val_loss, folder)
            dist.barrier()  # the checkpoint is on disk before any rank goes on
        if rank == 0:
            print(f"done: {step} steps, validation loss {val_loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
