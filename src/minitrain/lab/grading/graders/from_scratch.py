"""Graders of notebook 15: the learner's NaiveDDP, OverlappedDDP and BucketedDDP against torch's DDP.

    grade_scratch_ddp("naive")        # or "overlapped", "bucketed", "all"; the class from minitrain.scratch_ddp
    grade_scratch_ddp("all", world_sizes=(3,))   # the three levels at 3 ranks only

Each level runs in real gloo groups of 2 and 3 processes on the lab's MiniGPT (TrainConfig's
defaults, seeds 35000 + rank, the ranks' shards), beside torch's DistributedDataParallel on the
same batches. At 2 ranks the gradients and the weights after STEPS AdamW steps must be equal bit
for bit; at 3 within the tolerances below. Then the small models of from_scratch_cases (an unused layer and a
buffer, a tied weight) and, bucketed, a cap smaller than one parameter. Each common mistake is named: a
missing broadcast, a missing division, a hook that waits on the spot, buckets in forward order, a bucket
left unflushed, buffers not broadcast, a tied weight hooked twice, a tied weight counted twice, per-step
state not started afresh (the all-reduces are checked at every step).
A worker runs several classes in turn (`scratch_results`), so one group grades many.
"""

import importlib
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from minitrain.data import SEED_BASE, Shard, load_corpus
from minitrain.hang_report import named_mismatch
from minitrain.lab.grading.graders.from_scratch_cases import (CAP_MB, AllReduceRecorder, bucket_numels, buffer_case,
                                                              check_each_gradient_once, grads_of, tied_case,
                                                              unused_case, wrapper)
from minitrain.lab.grading.graders.running import (RUN_LIMIT_S, ExerciseError, join_group, rank_log_tails,
                                                   save_and_leave, silence_output, wait_for_every_rank)
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.script import import_script
from minitrain.todo import NotDone
from minitrain.tokenizer import Tokenizer
from minitrain.train import TrainConfig, build_model_for_corpus, seed_everything

LEVELS = {"naive": "NaiveDDP", "overlapped": "OverlappedDDP", "bucketed": "BucketedDDP"}
STEPS = 3  # AdamW steps compared with torch's DDP
TINY_CAP_MB = 1e-6  # smaller than any parameter: each one alone in its bucket
UNIT = 2.0**-24  # float32's unit roundoff
# At 3 ranks the gradients differ from DDP's in rounding only: DDP multiplies by 1/world_size (a rounded
# reciprocal), then gloo adds the 3 shares in an order set by where the buffer is cut. Each share is within
# 2u of g_i/w and a sum of w terms within (w-1)u of the exact one (|x| summed), so two results differ by at
# most 2(w+1)u * sum|g_i|/w per element (_grad_bound). Through AdamW the bound does not carry over
# (it divides by sqrt(v): a gradient that nearly cancels across ranks changes its update by up to 2 lr, less eps), so
# the weights get a working tolerance: a hundredth of lr per step (the verdict prints how far below it they stay).
WEIGHT_TOL = 1e-2 * TrainConfig.lr * STEPS


def _grad_bound(world_size: int) -> float:
    return 2 * (world_size + 1) * UNIT


def _rank_model(rank: int, config: TrainConfig, corpus_dir: Path) -> nn.Module:
    seed_everything(SEED_BASE + rank)  # as train.py: each rank its own init; the broadcast makes them rank 0's
    return build_model_for_corpus(corpus_dir, config.block_size)[0]


def _shard(rank: int, world_size: int, config: TrainConfig, corpus_dir: Path) -> Shard:
    """make_shard's batches, split here: ex15 is graded on its own, whatever Block B's make_shard holds (blank in
    the student edition). Any split would do: torch's DDP and the learner's class read the same shards."""
    sentences = load_corpus(corpus_dir / "train.jsonl")[rank::world_size]  # the sheet's index % world_size == rank
    return Shard(sentences, Tokenizer.load(corpus_dir / "vocab.json"), config.batch_size, config.block_size,
                 SEED_BASE + rank)


def _train(wrap: Callable[[nn.Module], nn.Module], rank: int, world_size: int, corpus_dir: Path,
           recorder: AllReduceRecorder | None = None) -> dict:
    """STEPS AdamW steps of the wrapped MiniGPT: its weights after wrapping, step 0's gradients, the end's weights,
    and each step's all-reduces."""
    config = TrainConfig()
    model = _rank_model(rank, config, corpus_dir)
    shard = _shard(rank, world_size, config, corpus_dir)
    wrapped = wrap(model)
    wrapped_weights = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    grads, steps = None, []
    for step in range(STEPS):
        before = len(recorder.calls) if recorder else 0
        loss = wrapped(next(shard)).loss
        with recorder.backward() if recorder else nullcontext():
            loss.backward()
        getattr(wrapped, "finish", lambda: None)()
        steps.append(recorder.calls[before:] if recorder else [])
        if step == 0:
            grads = grads_of(model)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"wrapped": wrapped_weights, "grads": grads, "weights": [p.detach().clone() for p in model.parameters()],
            "steps": steps}


def _local_grads(rank: int, world_size: int, corpus_dir: Path) -> list[torch.Tensor]:
    """Step 0's gradients of this rank alone: rank 0's weights, this rank's first batch."""
    config = TrainConfig()
    model = _rank_model(0, config, corpus_dir)
    model(next(_shard(rank, world_size, config, corpus_dir))).loss.backward()
    return grads_of(model)


def _compare_grads(got: list, want: list, local: list, sums: list, world_size: int,
                   names: list[str]) -> tuple[float, float]:
    """Step 0's gradients against DDP's (bit for bit at 2 ranks, within the rounding bound at 3): the
    largest difference and the largest share of its element's bound (0 at 2 ranks), or the mistake named."""
    worst, share, wrong = 0.0, 0.0, []
    for i, (g, w) in enumerate(zip(got, want)):
        if (g is None) != (w is None):
            raise ExerciseError(f"{names[i]}: gradient {'None' if g is None else 'set'} after finish(), torch DDP's is "
                                f"{'None' if w is None else 'set'}")
        if g is None:
            continue
        diff = (g - w).abs()
        bound = 0.0 if world_size == 2 else _grad_bound(world_size) * sums[i] / world_size
        if (diff > bound).any():
            wrong.append(i)
        worst = max(worst, diff.max().item())
        if world_size > 2:  # a zero bound (every rank's gradient 0 there) allows only a zero difference
            share = max(share, torch.where(bound > 0, diff / bound, 0.0).max().item())
    if not wrong:
        return worst, share
    if all(torch.equal(got[i], local[i]) for i in wrong):
        if len(wrong) == sum(g is not None for g in got):
            raise ExerciseError("no gradient averaged: after finish() every gradient is still this rank's own "
                                "(all-reduce each p.grad, not the weights p)")
        raise ExerciseError(f"a bucket left unflushed: after finish() {len(wrong)} gradient(s) ({names[wrong[0]]}, "
                            "...) are still this rank's own; launch every bucket (the last one too) before finish() "
                            "returns")
    if all(torch.allclose(got[i], world_size * want[i], rtol=1e-5, atol=1e-9) for i in wrong):
        raise ExerciseError(f"missing division: the gradients are the sum over the {world_size} ranks, not the "
                            f"average; divide by the world size ({names[wrong[0]]} is {world_size}x DDP's)")
    i = wrong[0]
    raise ExerciseError(f"{names[i]}: gradient differs from torch DDP's by {(got[i] - want[i]).abs().max().item():.2e}")


def _check_calls(level: str, calls: list[dict], params: list[nn.Parameter], cap_mb: float, step: int = 0) -> None:
    """The all-reduces of one step: launched during backward, not waited there, waited before finish() returned,
    and (bucketed) one per bucket of the reversed parameters."""
    if level == "naive" or not calls:
        if level != "naive":
            raise ExerciseError(f"no all-reduce launched at step {step}: call dist.all_reduce(..., async_op=True) from "
                                "the gradient hook")
        return
    if not any(c["in_backward"] for c in calls):
        if step > 0:
            raise ExerciseError(f"no overlap from step {step} on: step 0 launched all-reduces in backward, step {step} "
                                "launched every one after it; per-step state (which gradients are ready, which buckets "
                                "launched) must start afresh each step")
        raise ExerciseError("no overlap: every all-reduce was launched after backward; launch them from the gradient "
                            "hook")
    if any(c["waited"] == "backward" for c in calls if c["in_backward"]):
        raise ExerciseError("a hook that waits on the spot: an all-reduce launched in backward was waited for in "
                            "backward (wait() in the hook, or async_op=False), which stops backward until every rank "
                            "gets there; keep the work and wait for it in finish()")
    if any(c["waited"] is None for c in calls):
        raise ExerciseError("finish() returned before waiting for every all-reduce: wait for each work before the step")
    if level == "bucketed":
        got = tuple(sorted(c["numel"] for c in calls))
        if got in bucket_numels(params[::-1], cap_mb):
            return
        if got in bucket_numels(params, cap_mb):
            raise ExerciseError(f"buckets in forward order: at a {cap_mb:g} MiB cap the all-reduces have sizes "
                                f"{list(got)}, the buckets of the parameters in model order; backward makes the last "
                                "ones first: group reversed(parameters)")
        expected = sorted(bucket_numels(params[::-1], cap_mb))[0]
        raise ExerciseError(f"{len(calls)} all-reduce(s) of sizes {list(got)} per step at a {cap_mb:g} MiB cap; "
                            f"expected one per bucket of the reversed parameters, sizes {list(expected)}")


def _tiny_cap_case(cls: type, rank: int, world_size: int, corpus_dir: Path, reference: dict) -> None:
    recorder = AllReduceRecorder()
    try:
        run = _train(wrapper(cls, "bucketed", TINY_CAP_MB), rank, world_size, corpus_dir, recorder)
    finally:
        recorder.close()
    params = list(_rank_model(0, TrainConfig(), corpus_dir).parameters())
    for step, calls in enumerate(run["steps"]):
        if len(calls) != len(params):
            raise ExerciseError(f"a cap smaller than one parameter: at {TINY_CAP_MB:g} MiB each of the {len(params)} "
                                f"parameters is a bucket of its own, but {len(calls)} all-reduce(s) ran at step {step}")
    if world_size == 2 and not all(torch.equal(a, b) for a, b in zip(run["weights"], reference["weights"])):
        raise ExerciseError(f"a cap smaller than one parameter: at {TINY_CAP_MB:g} MiB the weights after {STEPS} steps "
                            "differ from torch DDP's")


def _on_every_rank(check: Callable[[], object]) -> object:
    """check()'s result; a mistake found on any rank is raised on every rank (rank order decides which), so that
    no rank goes on to the next case's collectives while another has stopped."""
    problem, result = None, None
    try:
        result = check()
    except ExerciseError as e:
        problem = str(e)
    problems = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    if any(problems):
        rank = next(r for r, p in enumerate(problems) if p)
        raise ExerciseError(f"{problems[rank]} (found on rank {rank} of {len(problems)})")
    return result


def _check_level(cls: type, level: str, rank: int, world_size: int, corpus_dir: Path, reference: dict,
                 local: list, sums: list) -> dict:
    """One class graded on this rank: its pass record {"status", "detail", "grad_diff", "weight_diff"};
    a mistake raises ExerciseError on every rank."""
    model0 = _rank_model(0, TrainConfig(), corpus_dir)
    names = [name for name, _ in model0.named_parameters()]
    params = list(model0.parameters())
    recorder = AllReduceRecorder()
    try:
        run = _train(wrapper(cls, level), rank, world_size, corpus_dir, recorder)
    finally:
        recorder.close()

    def broadcast() -> None:
        if not all(torch.equal(a, b) for a, b in zip(run["wrapped"], params)):
            raise ExerciseError("missing broadcast: after wrapping, this rank's weights are not rank 0's; broadcast "
                                "every parameter (and buffer) from rank 0 in __init__")

    def main_run() -> tuple[float, float, float]:
        check_each_gradient_once(level, run["steps"][0], model0, CAP_MB)  # MiniGPT's head.weight is tok_emb.weight
        grad_diff, grad_share = _compare_grads(run["grads"], reference["grads"], local, sums, world_size, names)
        for step, calls in enumerate(run["steps"]):  # every step: state left over from the last one shows later
            _check_calls(level, calls, params, CAP_MB, step)
        weight_diff = max((a - b).abs().max().item() for a, b in zip(run["weights"], reference["weights"]))
        if weight_diff > (0.0 if world_size == 2 else WEIGHT_TOL):
            raise ExerciseError(f"after {STEPS} AdamW steps the weights differ from torch DDP's by {weight_diff:.2e} "
                                f"(step 0's gradients agreed)")
        return grad_diff, grad_share, weight_diff

    _on_every_rank(broadcast)  # first: without it every later check fails too, for that reason
    grad_diff, grad_share, weight_diff = _on_every_rank(main_run)
    _on_every_rank(lambda: buffer_case(cls, level, rank))
    _on_every_rank(lambda: unused_case(cls, level, rank))
    _on_every_rank(lambda: tied_case(cls, level, rank))
    if level == "bucketed":
        _on_every_rank(lambda: _tiny_cap_case(cls, rank, world_size, corpus_dir, reference))
    return {"status": "pass", "grad_diff": grad_diff, "grad_bound_share": grad_share, "weight_diff": weight_diff,
            "detail": ""}


def _level_class(level: str, source: type | str | None) -> type:
    """The class graded: minitrain.scratch_ddp's (None), a class, or the level's class in a .py file (loaded by
    path, so that a file outside sys.path works whatever the workers' start method)."""
    if source is None:
        return getattr(importlib.import_module("minitrain.scratch_ddp"), LEVELS[level])
    if isinstance(source, str):
        return getattr(import_script(source), LEVELS[level])
    return source


def _hint(error: Exception) -> str:
    """What an exception from a level usually means, when one thing does (else "")."""
    text = str(error)
    if isinstance(error, AttributeError) and "'NoneType'" in text and "'wait'" in text:
        return ("; dist.all_reduce returned None: it returns a work to wait for only with async_op=True (without "
                "it, it waits on the spot)")
    if "'NoneType'" in text or "NoneType'>" in text:  # p.grad.something, or a collective given p.grad
        return ("; a gradient was None where the level used it: a hook registered with register_hook runs before "
                "autograd accumulates p.grad, register_post_accumulate_grad_hook after it (its argument is p)")
    if "cuda" in text.lower():
        return "; the lab runs on CPUs: wait for a gloo all-reduce with work.wait(), drop the CUDA call"
    return ""


def _scratch_rank(folder: str, entries: list[tuple[str, str, type | str | None]], corpus_dir: str) -> None:
    """One rank: torch DDP's run once, then each (label, level, class) in turn, each result saved."""
    rank = int(os.environ["RANK"])
    silence_output(Path(folder) / f"rank-{rank}.log")
    rank, world_size = join_group()
    corpus = Path(corpus_dir)
    reference = _train(DistributedDataParallel, rank, world_size, corpus)
    local = _local_grads(rank, world_size, corpus)
    sums = [g.abs() for g in local]
    for s in sums:
        dist.all_reduce(s)  # sum over the ranks of |g_i|: the scale of the rounding bound
    results = {}
    for label, level, source in entries:
        try:
            cls = _level_class(level, source)
            results[label] = _check_level(cls, level, rank, world_size, corpus, reference, local, sums)
        except ExerciseError as e:
            results[label] = {"status": "fail", "detail": str(e)}
        except NotImplementedError as e:
            results[label] = {"status": "not done", "detail": blank.what(e) or str(e)}
        except Exception as e:
            results[label] = {"status": "fail", "detail": f"{LEVELS[level]} raised {type(e).__name__} on rank {rank} "
                                                          f"of {world_size}: {e}{_hint(e)}"}
        wait_for_every_rank()  # the next class starts together on every rank
    save_and_leave(folder, rank, results)


def scratch_results(entries: list[tuple[str, str, type | str | None]], world_size: int,
                    corpus_dir: Path | None = None) -> list[dict]:
    """Each rank's results {label: {...}} of one real gloo run of `world_size` processes grading `entries`,
    (label, level, class: None for minitrain.scratch_ddp's, or a .py file's path) in turn."""
    from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
    corpus_dir = Path(corpus_dir or DEFAULT_CORPUS_DIR)
    if corpus_dir == DEFAULT_CORPUS_DIR:
        ensure_corpus(corpus_dir)  # generated on first use, before the ranks read it
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        try:
            spawn_workers(_scratch_rank, world_size, tmp, entries, str(corpus_dir), start_method=fast_start_method(),
                          timeout_s=RUN_LIMIT_S)
        except Exception as e:
            last = str(e).strip().splitlines()[-1]
            logs = "\n".join(p.read_text(errors="replace") for p in sorted(Path(tmp).glob("rank-*.log")))
            mismatch = named_mismatch(logs)  # a rank's terminate handler's line, above the tails' stacks
            raise ExerciseError(f"{mismatch + ': ' if mismatch else ''}the {world_size}-process run failed "
                                f"({type(e).__name__}: {last}); its ranks' output:\n{rank_log_tails(Path(tmp))}") from e
        return [json.loads((Path(tmp) / f"rank-{r}.json").read_text()) for r in range(world_size)]


def verdict(results: list[dict], label: str, world_size: int) -> str:
    """One class's line from every rank's results: its verdict (at 3 ranks the largest differences against their
    bound and tolerance), or ExerciseError naming the mistake."""
    mine = [r[label] for r in results]
    for result in mine:
        if result["status"] == "not done":
            raise NotDone(result["detail"])
        if result["status"] == "fail":
            raise ExerciseError(result["detail"])
    grad, weight = max(r["grad_diff"] for r in mine), max(r["weight_diff"] for r in mine)
    if world_size == 2:
        return f"{world_size} ranks: gradients and weights after {STEPS} steps bit for bit torch DDP's"
    share = max(r["grad_bound_share"] for r in mine)
    times = f" is {WEIGHT_TOL / weight:.0f} times that" if weight > 0 else ""
    return (f"{world_size} ranks: largest |difference| from torch DDP: gradients {grad:.1e}, at most {share:.2f} of "
            f"its element's rounding bound ({_grad_bound(world_size) / world_size:.1e} x sum|g|); weights after "
            f"{STEPS} steps {weight:.1e} (the tolerance {WEIGHT_TOL:.0e}{times})")


EXTRA = {"naive": "", "overlapped": "; one all-reduce per parameter, launched in backward, waited for in finish()",
         "bucketed": f"; one all-reduce per bucket of the reversed parameters, a {TINY_CAP_MB:g} MiB cap too"}


def grade_scratch_ddp(level: str = "all", cls: type | str | None = None, world_sizes: tuple[int, ...] = (2, 3)) -> str:
    """`level`'s class ("all": the three; minitrain.scratch_ddp's, read from disk by the workers, unless
    `cls`) in a real gloo group of each of `world_sizes`: one verdict line per level, or ExerciseError."""
    if level not in (*LEVELS, "all"):
        raise ValueError(f"level must be one of {', '.join(LEVELS)} or 'all', got {level!r}")
    levels = list(LEVELS) if level == "all" else [level]
    lines = {name: [] for name in levels}
    for world_size in world_sizes:
        results = scratch_results([(name, name, cls) for name in levels], world_size)
        for name in levels:
            try:
                lines[name].append(verdict(results, name, world_size))
            except ExerciseError as e:
                raise ExerciseError(f"{LEVELS[name]}: {e}") from e
    return "\n".join(f"{LEVELS[name]}: " + "; ".join(lines[name]) + "; a parameter without gradient, a buffer, "
                     "a tied weight handled" + EXTRA[name] for name in levels)


def grade_ex15(repo: Path, todo: Todo) -> str:
    """grade_scratch_ddp: its workers import the graded tree's minitrain.scratch_ddp (PYTHONPATH)."""
    return grade_scratch_ddp()
