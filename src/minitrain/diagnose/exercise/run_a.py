"""Fine-tune MiniGPT to answer prompts: the loss counts the answer's tokens only.

    python -m minitrain.launch --nproc-per-node=2 run_a.py

Every rank trains on its own slice of the examples; rank 0 logs and writes the checkpoint.
"""

import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.inrank import diagnosed
from minitrain.model import build_minigpt

SEED = int(os.environ.get("SEED", "7"))  # the data and the initial weights
VOCAB, BLOCK = 48, 24
SEP = VOCAB - 1  # the token between a prompt and its answer
N_EXAMPLES, N_VAL = 96, 16
GLOBAL_BATCH = 8  # examples per step, over every rank
STEPS = 12
LR, WARMUP_STEPS = 3e-3, 3
CLIP = 1.0
LOG_EVERY, EVAL_EVERY = 4, 6


def make_examples(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, answer) pairs of token ids: an answer echoes its prompt's tokens shifted by one."""
    g = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(n):
        preamble = 20 if torch.rand((), generator=g) < 0.02 else 4 * int(torch.randint(0, 3, (), generator=g))
        prompt = torch.randint(0, SEP, (preamble + int(torch.randint(2, 8, (), generator=g)),), generator=g)
        answer = (prompt[-6:] + 1) % SEP
        examples.append((prompt.tolist(), answer.tolist()))
    return examples


def collate(examples: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets and the mask of the targets that count (the answer's), cut to BLOCK tokens."""
    x = torch.zeros(len(examples), BLOCK, dtype=torch.long)
    y = torch.zeros(len(examples), BLOCK, dtype=torch.long)
    mask = torch.zeros(len(examples), BLOCK)
    for i, (prompt, answer) in enumerate(examples):
        tokens = (prompt + [SEP] + answer)[:BLOCK + 1]
        n = len(tokens) - 1
        x[i, :n], y[i, :n] = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
        mask[i, len(prompt):n] = 1.0  # the targets after SEP
    return x, y, mask


def answer_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over examples of each example's mean loss on its answer tokens."""
    logits = model((x, None)).logits
    per_token = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none").view_as(mask)
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def lr_at(step: int) -> float:
    if step < WARMUP_STEPS:
        return LR * (step + 1) / WARMUP_STEPS
    return LR * 0.5 * (1 + math.cos(math.pi * (step - WARMUP_STEPS) / (STEPS - WARMUP_STEPS)))


def evaluate(model: torch.nn.Module, val: list, rank: int, world: int) -> float:
    """The validation loss over every rank's slice of the validation examples."""
    model.eval()
    with torch.no_grad():
        loss = answer_loss(model, *collate(val[rank::world]))
    model.train()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    return total.item() / world


def save_checkpoint(model: DDP, optimizer: torch.optim.Optimizer, step: int, loss: float, folder: Path) -> None:
    path = folder / "checkpoint.pt"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "loss": loss}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def main() -> None:
    with diagnosed() as tools:
        rank, world = dist.get_rank(), dist.get_world_size()
        folder = tools.out or Path(".")
        torch.manual_seed(SEED)
        examples = make_examples(N_EXAMPLES + N_VAL, SEED)
        train, val = examples[:N_EXAMPLES], examples[N_EXAMPLES:]
        mine = train[rank::world]
        per_rank = GLOBAL_BATCH // world
        model = DDP(build_minigpt(VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, dropout=0.0))
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
        if rank == 0:
            print(f"{len(train)} examples, {world} ranks, {per_rank} per rank per step, {STEPS} steps", flush=True)
        started, skipped, logged = time.time(), 0, torch.zeros(2)
        for step in range(STEPS):
            tools.step(step)
            first = (step * per_rank) % len(mine)
            x, y, mask = collate(mine[first:first + per_rank])
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
            loss = answer_loss(model, x, y, mask)
            if not torch.isfinite(loss):
                skipped += 1
                continue
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            logged += torch.tensor([loss.item(), 1.0])
            if step % LOG_EVERY == LOG_EVERY - 1:
                dist.all_reduce(logged)
                if rank == 0:
                    print(f"step {step}: loss {logged[0] / logged[1]:.3f}, lr {lr_at(step):.2e}, "
                          f"{time.time() - started:.1f} s", flush=True)
                logged.zero_()
            if step % EVAL_EVERY == EVAL_EVERY - 1:
                val_loss = evaluate(model, val, rank, world)
                if rank == 0:
                    print(f"step {step}: validation loss {val_loss:.3f}", flush=True)
        final = evaluate(model, val, rank, world)
        if rank == 0:
            save_checkpoint(model, optimizer, step + 1, final, folder)
            print(f"done: {step + 1} steps, validation loss {final:.4f}, {skipped} skipped", flush=True)
        dist.barrier()


if __name__ == "__main__":
    main()
