"""A small DDP training run with one mistake of the kind a learner's code makes, for notebook 16:

    python -m minitrain.launch --nproc-per-node=2 -m minitrain.diagnose.faults KIND [--plain]

Each KIND's mistake sits in `train`, written as a learner writes it. The tool in the ranks comes from the
environment (inrank.diagnosed); the run's output stays as a learner sees it.
"""

import argparse
import inspect
import os
import re
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from minitrain.diagnose.inrank import Tools, diagnosed
from minitrain.gloo_setup import loopback_interface
from minitrain.launch.rendezvous import loopback_store
from minitrain.launch.spawn import fast_start_method
from minitrain.model import build_minigpt

KINDS = ("barrier-on-one-rank", "skipped-collective", "mismatched-shapes", "skipped-backward", "straggler")
STEPS, FAULT_STEP, VOCAB, BATCH, BLOCK = 6, 3, 64, 4, 16
SLOW_S = 0.25  # the straggler's extra work per step
# each KIND's mistake: the rank that does what the others do not (None: every rank runs the line, with other
# data) and the text of its line in `train` (as notebook 16's exercise defines it: a skipped backward's line is
# the backward skipped; a straggler's, its extra work)
PLANTED = {"barrier-on-one-rank": (0, "dist.barrier()  # wait"),
           "skipped-collective": (0, "dist.all_reduce(loss.detach())"),
           "mismatched-shapes": (None, "dist.all_reduce(kept.detach())"),
           "skipped-backward": (1, "loss.backward()"),
           "straggler": (1, "time.sleep(SLOW_S)")}


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's own tokens for a step (random, seeded by rank and step): its shard of the data."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(VOCAB, (BATCH, BLOCK + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(kind: str, rank: int, model: torch.nn.Module, tools: Tools) -> None:
    """STEPS steps of DDP training with `kind`'s mistake in them."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        tools.step(step)
        x, y = batch(rank, step)
        result = model((x, y))
        loss = result.loss
        optimizer.zero_grad()
        if kind == "skipped-backward" and rank == 1 and step == FAULT_STEP:
            tools.fault()
            continue  # "skip a bad batch", which only this rank judged bad
        if kind == "straggler" and rank == 1:
            tools.fault()
            time.sleep(SLOW_S)  # extra work on one rank: every step, the other waits for it in backward
        loss.backward()
        if not isinstance(model, DDP):  # --plain: the gradients averaged by hand, one all-reduce
            average_gradients(model)
        optimizer.step()
        if kind == "skipped-collective" and step == FAULT_STEP and rank == 0:
            tools.fault()
            dist.all_reduce(loss.detach())  # the mean loss, for the log: only rank 0 asks
            print(f"step {step}: mean loss {loss.item() / dist.get_world_size():.3f}", flush=True)
        if kind == "barrier-on-one-rank" and step == FAULT_STEP and rank == 0:
            tools.fault()
            torch.save(getattr(model, "module", model).state_dict(), os.devnull)  # a checkpoint
            dist.barrier()  # wait until the checkpoint is written: but only rank 0 is here
        if kind == "mismatched-shapes" and step == FAULT_STEP:
            tools.fault()
            per_token = F.cross_entropy(result.logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none")
            kept = per_token[per_token < per_token.median() + rank]  # each rank keeps its own count
            dist.all_reduce(kept.detach())  # summed across ranks: but the lengths differ
    print(f"rank {rank} done", flush=True)


def average_gradients(model: torch.nn.Module) -> None:
    """What DDP does, by hand: every gradient summed across ranks in one flat all-reduce, then divided."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="A DDP run with one mistake, for notebook 16.")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--plain", action="store_true", help="no DDP: the gradients averaged by hand (average_gradients), "
                   "as TORCH_DISTRIBUTED_DEBUG=DETAIL needs in torch 2.13")
    args = p.parse_args(argv)
    with diagnosed() as tools:
        torch.manual_seed(0)
        model = build_minigpt(VOCAB, block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
        train(args.kind, tools.rank, model if args.plain else DDP(model), tools)


def planted(kind: str) -> tuple[int | None, str]:
    """`kind`'s mistake: its rank (None: every rank) and its place, `faults.py:LINE`."""
    rank, text = PLANTED[kind]
    lines, first = inspect.getsourcelines(train)
    return rank, f"faults.py:{next(n for n, line in enumerate(lines, first) if text in line)}"


def mistake_lines(kind: str) -> str:
    """`kind`'s lines of `train`, numbered as in this file: the mistake, as a learner would read it."""
    lines, first = inspect.getsourcelines(train)
    shown, indent = [], None  # the indent of kind's `if`, while inside it
    for n, line in enumerate(lines, first):
        depth = len(line) - len(line.lstrip())
        if indent is not None and line.strip() and depth <= indent:
            indent = None
        if line.strip().startswith("if ") and f'"{kind}"' in line:
            indent = depth
        if indent is not None and line.strip():
            shown.append(f"{n:4} {line.rstrip()}")
    return "\n".join(shown)


def all_reduce_sizes(sizes: tuple[int, int], timeout_s: float = 1.0) -> list[str]:
    """What each rank's call does when rank r all-reduces `sizes[r]` floats, each r + 1, in a real 2-rank gloo
    group with the collective timeout `timeout_s`: a sentence per rank."""
    store = loopback_store(0, wait_for_workers=False)
    context = torch.multiprocessing.get_context(fast_start_method())
    with tempfile.TemporaryDirectory(prefix="minitrain-sizes-") as tmp:
        out = Path(tmp)
        ranks = [context.Process(target=_sizes_rank, args=(r, store.port, sizes, timeout_s, out)) for r in range(2)]
        for process in ranks:
            process.start()
        deadline = time.monotonic() + timeout_s + 60  # the start, the group, the call: seconds, not a minute
        while not all(p.exitcode is not None or (out / f"rank-{r}.txt").exists() for r, p in enumerate(ranks)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        (out / "done").touch()  # a rank whose call ended waits for this: its exit must not end the peer's call
        for process in ranks:
            process.join(timeout=10)
            if process.exitcode is None:
                process.kill()
                process.join()
        said = [_sizes_outcome(out, r, p.exitcode) for r, p in enumerate(ranks)]
    if any(s.startswith("waits until the timeout") for s in said):  # the other's call ended when its pair closed
        said = [f"waits until the other rank's timeout ({timeout_s:g} s) closes the connection, then {s}"
                if "by peer" in s else s for s in said]
    return said


def _sizes_rank(rank: int, port: int, sizes: tuple[int, int], timeout_s: float, out: Path) -> None:
    os.dup2(os.open(out / f"rank-{rank}.err", os.O_WRONLY | os.O_CREAT), 2)  # gloo's abort, from C++: the parent reads it
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=timeout_s))
    tensor = torch.full((sizes[rank],), rank + 1.0)
    try:
        dist.all_reduce(tensor)
        unsummed = int((tensor != 3.0).sum())
        said = (f"returns, {unsummed} of its {tensor.numel()} floats not summed: no error" if unsummed
                else f"returns its {tensor.numel()} floats summed")
    except RuntimeError as e:
        said = "raises: " + _gloo_error(str(e))
        if "Timed out" in said:
            said = f"waits until the timeout ({timeout_s:g} s), then raises"
    (out / f"rank-{rank}.txt").write_text(said)
    while not (out / "done").exists():
        time.sleep(0.05)
    os._exit(0)  # no destroy_process_group: the peer may be gone


def _gloo_error(text: str) -> str:
    """gloo's error in a few words: `Connection reset by peer`, `Timed out waiting 1000ms`, else its first line."""
    found = re.search(r"Connection \w+ by peer|Timed out waiting \d+ms", text)
    return found[0] if found else text.strip().splitlines()[-1][:80] if text.strip() else "nothing printed"


def _sizes_outcome(out: Path, rank: int, exitcode: int | None) -> str:
    said = out / f"rank-{rank}.txt"
    if said.exists():
        return said.read_text()
    err = (out / f"rank-{rank}.err").read_text()
    enforce = re.search(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)", err)
    if enforce:
        return f"aborts: a message of {enforce[1]} bytes where it expects at most {enforce[2]}"
    return f"ends with exit code {exitcode}: {_gloo_error(err)}"


if __name__ == "__main__":
    main()
