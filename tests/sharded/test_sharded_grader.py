"""Notebook 18's grader (ex18) on real gloo groups: the reference passes, a right optimizer in another form passes, a
blank stops before any process, and each wrong one is named (at 2 ranks, or at 3 where only 3 show it)."""

from pathlib import Path

import pytest

from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.lab.grading.graders.sharded import grade_sharded
from minitrain.paths import REPO

from graded_edits import blank_starts_no_process, edited

REFERENCE = (REPO / "src/minitrain/sharded_optimizer.py").read_text()
UNIQUE = "        unique = list(dict.fromkeys(p for p in params if p.requires_grad))  # read once; a tied weight once\n"
SUPER = "        super().__init__(unique, kwargs)\n"
GREEDY = """        for p in sorted(unique, key=lambda p: -p.numel()):  # the largest first: the parts end more even
            owner = loads.index(min(loads))
"""
GATHER = """        everyone = torch.empty(dist.get_world_size() * self.segment)
        dist.all_gather_single(everyone, mine)  # segment k: rank k's updated parameters
        for p, owner, offset in self.placed:
            start = owner * self.segment + offset
            p.copy_(everyone[start:start + p.numel()].view_as(p))
"""
WRONG = {  # name: (old, new[, old, new], the message's pattern, world sizes)
    # the base class given `params` first: the generator is used up before the list is made
    "generator-read-twice": (UNIQUE + SUPER, SUPER.replace("unique", "params") + UNIQUE,
                             r"^with `params` a generator the 2-rank run raised ValueError: optimizer got an empty "
                             r"parameter list at sharded_optimizer\.py:\d+, and not with a list", (2,)),
    # the hurried learner's step: its own part updated, never sent
    "never-shared": (GATHER, "", r"^after step\(\) the 2 ranks hold different weights", (2,)),
    # the tied weight kept twice: its second listing owned by another rank, stepped again there
    "tied-twice": (UNIQUE, "        unique = [p for p in params if p.requires_grad]\n",
                   r"the weight tied between tok_emb and head, listed twice in `params`, is stepped twice", (2,)),
    # every parameter kept and every gradient read, a frozen parameter's None included
    "frozen-crash": (UNIQUE, UNIQUE.replace(" if p.requires_grad", ""),
                     "            if p.grad is not None:\n                start = owner * self.segment + offset\n"
                     "                flat[start:start + p.numel()] = p.grad.reshape(-1)",
                     "            start = owner * self.segment + offset\n"
                     "            flat[start:start + p.numel()] = p.grad.reshape(-1)",
                     r"^with a parameter that has requires_grad=False \(pos_emb\.weight\), the 2-rank run raised "
                     r"AttributeError: .*at sharded_optimizer\.py:\d+", (2,)),
    # the sheet's split taken literally: len // n parameters each, the rest dropped
    "remainder-dropped": (GREEDY, "        k = len(unique) // n\n        for i, p in enumerate(unique[:n * k]):\n"
                          "            owner = i // k\n", r"on 3 ranks, ln_f\.bias stepped by no rank", (3,)),
    # the parameters dealt out in turn, by count: one rank owns most of the elements
    "by-count": (GREEDY, "        for i, p in enumerate(unique):\n            owner = i % n\n",
                 r"^on 2 ranks one rank's self\.optimizer holds [\d,]+ bytes of state, more than an even share .*"
                 r"balance the parameters by elements, not by count", (2,)),
    # both at once (a learner's first try): the frozen parameter's crash does not hide the split's mistake
    "frozen-crash-and-by-count": (UNIQUE, UNIQUE.replace(" if p.requires_grad", ""),
                                  "            if p.grad is not None:\n                start = owner * self.segment + offset\n"
                                  "                flat[start:start + p.numel()] = p.grad.reshape(-1)",
                                  "            start = owner * self.segment + offset\n"
                                  "            flat[start:start + p.numel()] = p.grad.reshape(-1)",
                                  GREEDY, "        for i, p in enumerate(unique):\n            owner = i % n\n",
                                  r"(?s)^with a parameter that has requires_grad=False.*\non 2 ranks one rank's "
                                  r"self\.optimizer holds .*balance the parameters by elements", (2,)),
    # an optimizer over every parameter on every rank: right weights, no memory saved
    "whole-state": ("        self.optimizer = optimizer_cls([p for p, owner, _ in self.placed if owner == self.rank], "
                    "**kwargs)", "        self.optimizer = optimizer_cls(unique, **kwargs)",
                    r"^every rank's self\.optimizer steps every parameter and holds [\d,]+ bytes of state on 2 ranks", (2,)),
    # the reduce-scatter done, its result never put into .grad: each rank steps with its own gradients
    "never-written": ("        for p, owner, offset in self.placed:\n            if owner == self.rank:\n"
                      "                p.grad = mine[offset:offset + p.numel()].view_as(p).clone()\n", "",
                      r"^average_gradients left each owned parameter's \.grad this rank's own", (2,)),
    # the reduce-scatter's sum kept: right under AdamW (nearly), wrong under SGD
    "summed": ("        mine /= n\n", "", r"^average_gradients left each owned parameter's \.grad the sum", (2,)),
    # a GPU tutorial's buffers on the device
    "cuda-buffers": ("        flat = torch.zeros(n * self.segment)", "        flat = torch.zeros(n * self.segment).cuda()",
                     r"makes a CUDA call", (2,)),
}

OTHER_FORM = {  # each owner broadcasts its parameters; gradients reduced to their owner one by one
    GATHER: "        for p, owner, _ in self.placed:\n            dist.broadcast(p, src=owner)\n",
    "        dist.reduce_scatter_single(mine, flat)  # the sum of every rank's segment `rank`, on this rank only\n":
    "        for k in range(n):\n            dist.reduce(flat[k * self.segment:(k + 1) * self.segment], dst=k)\n"
    "        mine.copy_(flat[self.rank * self.segment:(self.rank + 1) * self.segment])\n",
}


def optimizer_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sharded_optimizer.py"
    path.write_text(text)
    return path


def test_the_reference_passes(tmp_path):
    assert grade_sharded(optimizer_file(tmp_path, REFERENCE)).startswith("ex18: correct.")


def test_an_optimizer_in_another_form_passes(tmp_path):
    other = edited(REFERENCE, *(text for pair in OTHER_FORM.items() for text in pair))
    assert grade_sharded(optimizer_file(tmp_path, other)).startswith("ex18: correct.")


def test_a_blank_stops_before_any_process(tmp_path, monkeypatch):
    blank_starts_no_process(grade_sharded, tmp_path / "sharded_optimizer.py", REFERENCE, "        self.optimizer.step()\n",
                            "ShardedOptimizer.step", monkeypatch)


@pytest.mark.parametrize("name", WRONG)
def test_each_wrong_optimizer_is_named(tmp_path, name):
    *edits, named, world_sizes = WRONG[name]
    wrong = edited(REFERENCE, *edits)
    with pytest.raises(ExerciseError, match=named):
        grade_sharded(optimizer_file(tmp_path, wrong), world_sizes)
