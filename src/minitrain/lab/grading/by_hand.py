"""DDP's arithmetic by hand, in one process: what a 2-rank run of train.py must end with, bit for bit.

DDP starts every rank from rank 0's weights, and at each step gives every rank the same gradient:
each rank's gradient divided by 2, the two halves added (gloo's ring adds each element once, and
a + b = b + a), then the same AdamW step. One process can do exactly that: build rank 0's model,
take each rank's batch from its shard, add the two half-gradients, step. With one thread (a
torchrun rank of 2 has one) it gives the same bits as the real run, which makes it a grader for
Block C: a learner's loop that forgets `zero_grad`, or uses another learning rate, still keeps the
ranks equal, but no longer matches this. It is the grader's expected value, written without DDP or a
process group (one process adds the halves itself), so it is not Block C's answer to copy.
"""

import threading
from functools import cache
from pathlib import Path

import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.data import SEED_BASE, make_shard
from minitrain.train import TrainConfig, build_model_for_corpus, seed_everything
from minitrain.verify import state_bytes

WORLD_SIZE = 2  # at 2 ranks the order of the sum cannot matter; at 3 it can (notebook 15's question)
_ONE_AT_A_TIME = threading.Lock()  # the global RNG and thread count it sets: graders run side by side in threads


def ddp_by_hand(steps: int, corpus_dir: Path = DEFAULT_CORPUS_DIR, zero_grad: bool = True) -> dict[str, torch.Tensor]:
    """The state dict a 2-rank DDP run of train.py holds after `steps` steps (the lab's seeds and
    defaults); `zero_grad=False`: the same loop with gradients left to accumulate, a learner's mistake."""
    with _ONE_AT_A_TIME:
        corpus = Path(corpus_dir).resolve()
        written = (corpus / "train.jsonl").stat().st_mtime_ns if (corpus / "train.jsonl").is_file() else 0
        state = _by_hand(steps, corpus, written, zero_grad)
    return {name: t.clone() for name, t in state.items()}


@cache  # deterministic: a class's submissions, and the two loops judge_run tries, share one computation
def _by_hand(steps: int, corpus_dir: Path, _written_ns: int, zero_grad: bool) -> dict[str, torch.Tensor]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a torchrun rank of 2 runs on one thread; other counts cut sums otherwise
    try:
        seed_everything(SEED_BASE)  # rank 0's weights: the ones DDP broadcasts
        model, _ = build_model_for_corpus(corpus_dir, TrainConfig.block_size)
        shards = [make_shard(rank, WORLD_SIZE, corpus_dir) for rank in range(WORLD_SIZE)]
        optimizer = torch.optim.AdamW(model.parameters(), lr=TrainConfig.lr)
        params = list(model.parameters())
        for _ in range(steps):
            local = [torch.autograd.grad(model(next(shard)).loss, params) for shard in shards]
            for p, *grads in zip(params, *local):
                if p.grad is not None:  # not zeroed: each rank's .grad holds the last average plus its new gradient
                    grads = [p.grad + g for g in grads]
                p.grad = grads[0] / WORLD_SIZE + grads[1] / WORLD_SIZE  # DDP's hook divides, then gloo adds
            optimizer.step()
            if zero_grad:
                optimizer.zero_grad(set_to_none=True)
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    finally:
        torch.set_num_threads(threads)


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """The two state dicts bit for bit, judged on their bytes (minitrain.verify): the grader's own test, not
    notebook 03's exercise answer."""
    return state_bytes(a) == state_bytes(b)


def judge_run(states: list[dict[str, torch.Tensor]], steps: int, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> str:
    """'' when a 2-rank run's final states (one per rank) are DDP's arithmetic bit for bit, else the
    mistake, named as far as the states tell it."""
    if not same_bits(states[0], states[1]):
        return ("the two ranks end with different weights: is the model wrapped (setup's `wrap`) before "
                "the first step, and does every step go through the wrapped model?")
    if same_bits(states[0], ddp_by_hand(steps, corpus_dir)):
        return ""
    if same_bits(states[0], ddp_by_hand(steps, corpus_dir, zero_grad=False)):
        return "the gradients pile up from step to step: zero them after each optimizer step (optimizer.zero_grad())"
    return (f"the ranks agree, but not with DDP's arithmetic after {steps} steps: build the model and shard with "
            "the lab's seeds (35000 + rank), AdamW at lr 3e-4, one forward, backward and optimizer step per batch")
