"""Notebook 19's grader (ex19): the learner's minimal FSDP (minitrain.fsdp) on real gloo groups of 2 and 3 processes,
held to one process on the whole batch with SGD and momentum. Each rank also reports what its units hold at each
moment of a step (the gathered buffers' bytes after construction, after forward, after the step; the parameters'
whole gradients after after_backward; which tensors the optimizer steps; each shard's gradient against the average
the grader computes itself), so that a mistake is named where it is made."""

import os
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.lab.grading.graders.running import (gpu_habit, grade_on_ranks, join_group, raised_at,
                                                   save_and_leave, silence_output)
from minitrain.lab.grading.graders.small_gpt import LENGTH, SGD, STEPS, TOLERANCE, VOCAB, batch, flat, one_process
from minitrain.lab.todos.registry import Todo
from minitrain.model import build_minigpt
from minitrain.script import import_script

WORLD_SIZES = (2, 3)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)  # 2 blocks of 12 parameters, a root of 5 (the tied weight once): 16,037 elements in the root
    return build_minigpt(VOCAB, block_size=LENGTH, n_layer=2, n_head=2, n_embd=32)


def reference(n: int) -> list[float]:
    """The weights of one process after STEPS steps of SGD on the whole batch (n shares, in order)."""
    return one_process(_model(), n)


def _gathered_bytes(units: list) -> list[int]:
    return [unit.full.untyped_storage().nbytes() for unit in units]


def _expected_shards(units: list, rank: int, n: int) -> dict[str, list[list[float]]]:
    """Each unit's shard of its gradients, this rank's own, their sum over the ranks and their average, as the
    grader computes them from the parameters' .grad after backward (before the learner's after_backward)."""
    found: dict[str, list[list[float]]] = {"own": [], "sum": [], "average": []}
    for unit in units:
        grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                          for p in unit.params])
        size = unit.shard.numel()
        grads = torch.cat([grads, grads.new_zeros(max(0, size * n - grads.numel()))])
        summed = grads.clone()
        dist.all_reduce(summed)  # the grader's own: the learner's after_backward runs next
        for name, whole in (("own", grads), ("sum", summed), ("average", summed / n)):
            found[name].append(whole[rank * size:(rank + 1) * size].tolist())
    return found


def _run(module, rank: int, n: int, result: dict) -> None:
    """The learner's FSDP through STEPS steps, what it held at each moment written into `result` as it goes (an
    exception leaves what came before it)."""
    model = _model()
    names = {id(p): name for name, p in model.named_parameters()}
    units, optimizer = module.shard_model(model, torch.optim.SGD, **SGD)
    stepped = [id(p) for group in optimizer.param_groups for p in group["params"]]
    result.update({
        "units": [[names.get(id(p), "?") for p in unit.params] for unit in units],
        "elements": [sum(p.numel() for p in unit.params) for unit in units],
        "shard": [unit.shard.numel() for unit in units],
        "gathered after construction": _gathered_bytes(units),
        "optimizer steps": ("the shards" if stepped == [id(u.shard) for u in units] else
                            "the model's parameters" if set(stepped) <= set(names) else "other tensors")})
    for step in range(STEPS):
        x, y = batch(step, rank, n)
        optimizer.zero_grad(set_to_none=True)
        loss = model((x, y)).loss
        if step == 0:
            result["gathered after forward"] = _gathered_bytes(units)
        loss.backward()
        if step == 0:
            expected = _expected_shards(units, rank, n)
        module.after_backward(units)
        if step == 0:
            got = [u.shard.grad.reshape(-1).tolist() if u.shard.grad is not None else None for u in units]
            result["shard gradients"] = next(
                (name for name in ("average", "sum", "own") if all(
                    g is not None and torch.allclose(torch.tensor(g), torch.tensor(e), atol=1e-7)
                    for g, e in zip(got, expected[name]))), "none" if None in got else "other")
            result["whole gradients kept"] = sum(p.grad.numel() * 4 for p in model.parameters() if p.grad is not None)
        optimizer.step()
    result["gathered after the step"] = _gathered_bytes(units)
    for unit in units:
        unit.gather()
    result["after"] = flat(model).tolist()


def _rank(logs: str, path: str) -> None:
    """One rank: the learner's FSDP through STEPS steps, what it did, into logs/rank-R.json; an exception's last line
    and the learner's line it came from, in place of the results."""
    silence_output(Path(logs) / f"rank-{os.environ['RANK']}.log")
    rank, n = join_group()
    module = import_script(Path(path))
    results: dict = {}
    try:
        _run(module, rank, n, results)
    except Exception as e:
        results["raised"] = raised_at(e, path)
        results["in backward"] = any(f.name == "backward" for f in traceback.extract_tb(e.__traceback__))
    save_and_leave(logs, rank, results)


def mistakes(n: int, results: list[dict]) -> list[str]:
    """What is wrong in the ranks' results of an n-process run, each mistake once; none: right."""
    said = next((r for r in results if "raised" in r), None)
    if said and (habit := gpu_habit("shard_model", said["raised"])):
        return [habit]
    first, found = results[0], []
    if "units" not in first:  # shard_model itself raised
        return [f"shard_model on {n} ranks raised {said['raised']}"]
    everyone = [name for unit in first["units"] for name in unit]
    if twice := sorted({name for name in everyone if everyone.count(name) > 1}):
        found.append(f"{', '.join(twice)} held twice by the units: a weight tied between two modules is one "
                     "parameter, in one unit, once (held twice, its two copies are stepped apart and end different)")
    if missing := [name for name, _ in _model().named_parameters() if name not in everyone]:
        found.append(f"{', '.join(missing)} in no unit: every parameter belongs to one")
    if short := [k for k, (e, s) in enumerate(zip(first["elements"], first["shard"])) if s * n < e]:
        k = short[0]
        found.append(f"unit {k}'s {n} shards of {first['shard'][k]:,} elements cover {first['shard'][k] * n:,} of its "
                     f"{first['elements'][k]:,}: pad the flat buffer to a multiple of the world size, never drop its end")
    if first["optimizer steps"] != "the shards":
        found.append(f"the optimizer steps {first['optimizer steps']}, not the units' shards: build it after the "
                     "sharding, over [unit.shard for unit in units] (the model's parameters are views of buffers "
                     "that are freed)")
    if found or said:  # the units' shape first: a crash further on is often its consequence
        return found or [f"backward on {n} ranks raised {said['raised']}: backward needs a unit's parameters again, "
                         "after free(): gather it just before its backward too (register_full_backward_pre_hook), free "
                         "it just after (register_full_backward_hook)" if said["in backward"] else
                         f"the {n}-rank run raised {said['raised']}"]
    if any(b for r in results for b in r["gathered after construction"]):
        found.append("a unit is still gathered after shard_model: free each unit once it is built")
    if any(b for r in results for b in r["gathered after forward"][:-1]):
        found.append("a block's unit is still gathered after the forward: free it just after its forward (the full "
                     "parameters kept on every rank save nothing)")
    if any(b for r in results for b in r["gathered after the step"]):
        found.append("a unit is still gathered after the step: after_backward frees the root, the hooks the blocks")
    if kept := max(r["whole gradients kept"] for r in results):
        found.append(f"after after_backward a rank still holds its parameters' whole gradients ({kept:,} bytes): "
                     "reduce-scatter them into each shard's .grad and let them go (.grad = None), or nothing is saved")
    if found:
        return found
    said = {r["shard gradients"] for r in results} - {"average"}
    if said:
        return [{"sum": "each shard's .grad holds the sum over the ranks: divide by the world size",
                 "own": "each shard's .grad holds this rank's own gradients: reduce-scatter them (summed over every "
                        "rank, then divided by the world size)",
                 "none": "a shard has no .grad after after_backward: reduce_gradients sets unit.shard.grad"}.get(
            said.pop(), "each shard's .grad holds neither its average over the ranks nor their sum: the flat "
                        "gradients laid out as unit.full, then this rank's part")]
    if any(r["after"] != first["after"] for r in results):
        return [f"after the steps the {n} ranks' gathered weights differ"]
    worst = max(abs(a - b) for a, b in zip(first["after"], reference(n)))
    if worst > TOLERANCE:
        return [f"on {n} ranks the weights end {worst:.1e} from one process's on the whole batch (tolerance "
                f"{TOLERANCE:g}): the step must equal SGD on the average gradient"]
    return []


def grade_fsdp(path: Path, world_sizes: tuple[int, ...] = WORLD_SIZES) -> str:
    """The learner's minitrain/fsdp.py at `path` on real groups of each size: one PASS line, or the mistakes named;
    a stub still blank stops before any process starts."""
    grade_on_ranks(path, _rank, mistakes, world_sizes, run="of your FSDP")
    return (f"ex19: correct. shard_model, Unit and after_backward on {', '.join(map(str, world_sizes))} real ranks "
            "with SGD and momentum: every parameter in one unit, the shards covering each unit, each block freed "
            "after its forward, the whole gradients let go, the optimizer over the shards, weights within "
            f"{TOLERANCE:g} of one process on the whole batch")


def grade_ex19(repo: Path, todo: Todo) -> str:
    """Notebook 19's exercise: the graded tree's minitrain/fsdp.py."""
    return grade_fsdp(repo / todo.file)
