"""Notebook 18's grader (ex18): the learner's ShardedOptimizer (minitrain.sharded_optimizer) on real gloo groups of 2
and 3 processes, held to one process on the whole batch, with SGD and momentum (not the notebook's AdamW: Adam's
update hardly changes when every gradient is scaled, so a sum where the average is asked would pass under it).
Each rank also reports which parameters its `self.optimizer` steps, its state's bytes and its gradients after
average_gradients, so that a mistake is named where it is made."""

import os
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.lab.grading.graders.running import (gpu_habit, grade_on_ranks, join_group, raised_at,
                                                   save_and_leave, silence_output)
from minitrain.lab.grading.graders.small_gpt import LENGTH, SGD, STEPS, TOLERANCE, VOCAB, batch, flat, one_process
from minitrain.lab.todos.registry import Todo
from minitrain.model import build_minigpt
from minitrain.script import import_script

WORLD_SIZES = (2, 3)  # its 16 parameters divide among 2 ranks, not among 3
CASES = ("generator", "tied", "frozen")  # params as model.parameters(); listed from each module; one frozen


def _model(case: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_minigpt(VOCAB, block_size=LENGTH, n_layer=1, n_head=2, n_embd=32)
    if case == "frozen":
        model.pos_emb.weight.requires_grad_(False)
    return model


def _params(model: torch.nn.Module, case: str):
    """What the case passes as `params`: a generator, or a list that holds the tied weight twice."""
    if case == "tied":
        return [p for module in (model.tok_emb, model.pos_emb, model.blocks, model.ln_f, model.head)
                for p in module.parameters()]
    return (p for p in model.parameters())


def reference(case: str, n: int) -> list[float]:
    """The weights of one process after STEPS steps of SGD on the whole batch (n shares, in order)."""
    return one_process(_model(case), n)


def _gradients_after(model: torch.nn.Module, owned: list[int], average) -> str:
    """What the owned parameters' .grad hold after `average()`: the average, the sum, this rank's own, or other."""
    params = list(model.parameters())
    local = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    summed = [g.clone() for g in local]
    for g in summed:
        dist.all_reduce(g)  # the grader's own: the learner's code runs after
    average()
    n = dist.get_world_size()
    for name, want in (("average", [s / n for s in summed]), ("sum", summed), ("own", local)):
        if all(params[i].grad is not None and torch.allclose(params[i].grad, want[i], atol=1e-7) for i in owned):
            return name
    return "other"


def _case(module, case: str, rank: int, n: int) -> dict:
    model = _model(case)
    before = flat(model)
    optimizer = module.ShardedOptimizer(_params(model, case), torch.optim.SGD, **SGD)
    index = {id(p): i for i, p in enumerate(model.parameters())}
    inner = getattr(optimizer, "optimizer", None)
    stepped = [p for group in inner.param_groups for p in group["params"]] if isinstance(inner, torch.optim.Optimizer) else None
    result: dict = {"owned": None if stepped is None or any(id(p) not in index for p in stepped) else
                    [index[id(p)] for p in stepped]}
    for step in range(STEPS):
        x, y = batch(step, rank, n)
        optimizer.zero_grad(set_to_none=True)
        model((x, y)).loss.backward()
        if step == 0 and result["owned"]:
            result["gradients"] = _gradients_after(model, result["owned"], optimizer.average_gradients)
        else:
            optimizer.average_gradients()
        optimizer.step()
        if step == 0:  # SGD's momentum exists after a first step
            result["state_bytes"] = None if stepped is None else sum(
                v.numel() * v.element_size() for s in inner.state.values() for v in s.values() if torch.is_tensor(v))
    result["before"], result["after"] = before.tolist(), flat(model).tolist()
    return result


def _rank(logs: str, path: str) -> None:
    """One rank: each case of the learner's optimizer, what it did, into logs/rank-R.json; an exception's last
    line and the learner's line it came from, in place of a case's results."""
    silence_output(Path(logs) / f"rank-{os.environ['RANK']}.log")
    rank, n = join_group()
    module = import_script(Path(path))
    results = {}
    for case in CASES:
        try:
            results[case] = _case(module, case, rank, n)
        except Exception as e:
            results[case] = {"raised": raised_at(e, path)}
        dist.monitored_barrier()  # the next case starts together on every rank
    save_and_leave(logs, rank, results)


def _state_share(n: int) -> int:
    """The most SGD state (momentum) bytes one rank may hold: an even share of the model's, plus its largest
    parameter's (whole parameters do not split evenly)."""
    sizes = [p.numel() * 4 for p in _model("generator").parameters()]
    return sum(sizes) // n + max(sizes)


def mistakes(n: int, results: list[dict]) -> list[str]:
    """What is wrong in the ranks' results of an n-process run, each mistake once; none: right."""
    names = [name for name, _ in _model("generator").named_parameters()]
    found: list[str] = []
    raised = {case: next((r[case]["raised"] for r in results if "raised" in r[case]), None) for case in CASES}
    if raised["generator"] and not raised["tied"]:
        return [f"with `params` a generator the {n}-rank run raised {raised['generator']}, and not with a list: a "
                "generator can be read once; read it into a list once, and build everything from that list"]
    if habit := next((h for said in raised.values() if said and (h := gpu_habit("ShardedOptimizer", said))), None):
        return [habit]
    for case, said in raised.items():
        if said:
            found.append(f"with a parameter that has requires_grad=False (pos_emb.weight), the {n}-rank run raised "
                         f"{said}: leave such a parameter out (it never gets a .grad)" if case == "frozen" else
                         f"the {n}-rank run ({case} params) raised {said}")
    if raised["generator"] or raised["tied"]:
        return found  # a frozen parameter's crash alone leaves the other cases to check
    plain = [r["generator"] for r in results]
    if any(r["after"] != plain[0]["after"] for r in plain):
        return found + [f"after step() the {n} ranks hold different weights: each rank's updated parameters must reach every "
                "rank (an all-gather, or a broadcast from each parameter's owner)"]
    if plain[0]["after"] == plain[0]["before"]:
        return found + ["after two steps no parameter changed: `params` was a generator here, which can be read once; read "
                "it into a list once, and build everything from that list"]
    owned = [r["owned"] for r in plain]
    if None not in owned:
        count = [sum(o.count(i) for o in owned) for i in range(len(names))]
        whole = sum(p.numel() * 4 for p in _model("generator").parameters())
        most = max(r["state_bytes"] or 0 for r in plain)
        if all(c >= n for c in count):
            found.append(f"every rank's self.optimizer steps every parameter and holds {most:,} bytes of state on {n} "
                         f"ranks, the whole model's {whole:,}: build it over this rank's own parameters only, or "
                         "nothing is saved")
        elif most > _state_share(n):
            found.append(f"on {n} ranks one rank's self.optimizer holds {most:,} bytes of state, more than an even "
                         f"share of the model's {whole:,} plus its largest parameter's ({_state_share(n):,}): balance "
                         "the parameters by elements, not by count (each, largest first, to the rank owning the fewest "
                         "elements so far)")
        elif twice := [names[i] for i, c in enumerate(count) if c > 1]:
            found.append(f"on {n} ranks, {', '.join(twice)} stepped by more than one rank: each parameter has one owner")
        if missing := [names[i] for i, c in enumerate(count) if c == 0]:
            found.append(f"on {n} ranks, {', '.join(missing)} stepped by no rank: every parameter needs an owner, also "
                         "when their number does not divide by the world size (len(params) // n each drops the rest)")
        if sum((r["tied"]["owned"] or []).count(0) for r in results) > count[0]:
            found.append("the weight tied between tok_emb and head, listed twice in `params`, is stepped twice: a "
                         "tensor listed twice is one parameter (keep the first of each)")
        said = {r["generator"].get("gradients") for r in results} - {"average", None}
        if said and len(found) == bool(raised["frozen"]):  # the owners known: which gradients must be averaged
            found.append({"sum": "average_gradients left each owned parameter's .grad the sum over the ranks: divide by "
                                 "the world size",
                          "own": "average_gradients left each owned parameter's .grad this rank's own: reduce-scatter "
                                 "them (every rank's gradients summed, then divided by the world size)"}.get(
                said.pop(), "average_gradients left the owned parameters' .grad holding neither their average over "
                            "the ranks nor their sum"))
    if found:
        return found
    frozen = results[0]["frozen"]
    if frozen["after"][2048:2048 + 512] != frozen["before"][2048:2048 + 512]:
        return ["pos_emb.weight has requires_grad=False and changed: leave such a parameter out"]
    for case in CASES:
        want = reference(case, n)
        worst = max(abs(a - b) for a, b in zip(results[0][case]["after"], want))
        if worst > TOLERANCE:
            return [f"on {n} ranks ({case} params) the weights end {worst:.1e} from one process's on the whole batch "
                    f"(tolerance {TOLERANCE:g}): the step must equal SGD on the average gradient"]
    return []


def grade_sharded(path: Path, world_sizes: tuple[int, ...] = WORLD_SIZES) -> str:
    """The learner's minitrain/sharded_optimizer.py at `path` on real groups of each size: one PASS line, or the
    mistakes named; a stub still blank stops before any process starts."""
    grade_on_ranks(path, _rank, mistakes, world_sizes, run="of your ShardedOptimizer")
    return (f"ex18: correct. ShardedOptimizer on {', '.join(map(str, world_sizes))} real ranks with SGD and momentum: "
            f"params as a generator, a tied weight listed twice, a frozen parameter; each parameter stepped by one "
            f"rank, each rank's state its share, weights within {TOLERANCE:g} of one process on the whole batch")


def grade_ex18(repo: Path, todo: Todo) -> str:
    """Notebook 18's exercise: the graded tree's minitrain/sharded_optimizer.py."""
    return grade_sharded(repo / todo.file)
