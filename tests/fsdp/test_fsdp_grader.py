"""Notebook 19's grader (ex19) on real gloo groups: the reference passes, a right FSDP in another form passes, a blank
stops before any process, and each wrong one is named (at 2 ranks, or at 3 where only 3 show it)."""

from pathlib import Path

import pytest

from minitrain.lab.grading.graders.fsdp import grade_fsdp
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.paths import REPO

from graded_edits import blank_starts_no_process, edited

REFERENCE = (REPO / "src/minitrain/fsdp.py").read_text()
SCATTER = "        dist.reduce_scatter_single(mine, flat)\n"
PADDED = """        size = -(-total // n)  # the shard's length: rounded up, so that the last elements are not dropped
        self.full = torch.zeros(size * n)
        self.full[:total] = torch.cat([p.detach().reshape(-1) for p in params])
"""
WRONG = {  # name: (old, new[, old, new], the message's pattern, world sizes)
    # the GPU tutorial's all-reduce of every gradient, kept whole: right numbers, no memory saved
    "whole-gradients-kept": ("            p.grad = None\n", "",
                             r"^after after_backward a rank still holds its parameters' whole gradients \([\d,]+ bytes\)",
                             (2,)),
    # the hurried learner's hooks: gathered before forward, never freed after it
    "kept-after-forward": ("        block.register_forward_hook(lambda module, args, output, unit=unit: unit.free())\n", "",
                           r"^a block's unit is still gathered after the forward", (2,)),
    # the skeleton's split taken literally: total // n elements a shard, the end of the buffer dropped
    "remainder-dropped": (PADDED, "        size = total // n\n"
                          "        self.full = torch.cat([p.detach().reshape(-1) for p in params])\n",
                          r"^unit 0's 3 shards of [\d,]+ elements cover [\d,]+ of its [\d,]+: pad", (3,)),
    # the root built from its modules: the tied weight listed from tok_emb and again from head
    "tied-twice": ("    root = Unit([p for p in model.parameters() if id(p) not in claimed])",
                   "    root = Unit([p for m in (model.tok_emb, model.pos_emb, model.ln_f, model.head) for p in m.parameters()])",
                   r"^tok_emb\.weight held twice by the units", (2,)),
    # the gradients of the gathered copy never reduced: each rank steps its shard with its own gradients
    "unreduced": (SCATTER + "        self.shard.grad = mine / n\n",
                  "        mine.copy_(flat[dist.get_rank() * mine.numel():(dist.get_rank() + 1) * mine.numel()])\n"
                  "        self.shard.grad = mine\n", r"^each shard's \.grad holds this rank's own gradients", (2,)),
    # the sum kept
    "summed": ("        self.shard.grad = mine / n\n", "        self.shard.grad = mine\n",
               r"^each shard's \.grad holds the sum over the ranks", (2,)),
    # the optimizer built first, over the model's parameters, as for DDP
    "optimizer-first": ("    units, claimed = [], set()\n",
                        "    optimizer = optimizer_cls(model.parameters(), **kwargs)\n    units, claimed = [], set()\n",
                        "    return units, optimizer_cls([unit.shard for unit in units], **kwargs)\n",
                        "    return units, optimizer\n",
                        r"^the optimizer steps the model's parameters, not the units' shards", (2,)),
    # forward's gather only: backward meets freed parameters
    "no-gather-in-backward": ("        block.register_full_backward_pre_hook(lambda module, grad_output, unit=unit: unit.gather())\n",
                              "", r"^backward on 2 ranks raised .*gather it just before its backward too", (2,)),
    # buffers made on the GPU
    "cuda-buffers": ("        self.full = torch.zeros(size * n)\n", "        self.full = torch.zeros(size * n).cuda()\n",
                     r"makes a CUDA call", (2,)),
}
OTHER_FORM = {  # the whole flat gradients all-reduced, this rank's part kept, the whole let go
    SCATTER: "        dist.all_reduce(flat)\n        mine.copy_(flat.view(n, -1)[dist.get_rank()])\n",
}


def fsdp_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fsdp.py"
    path.write_text(text)
    return path


def test_the_reference_passes(tmp_path):
    assert grade_fsdp(fsdp_file(tmp_path, REFERENCE)).startswith("ex19: correct.")


def test_an_fsdp_in_another_form_passes(tmp_path):
    other = edited(REFERENCE, *(text for pair in OTHER_FORM.items() for text in pair))
    assert grade_fsdp(fsdp_file(tmp_path, other), (2,)).startswith("ex19: correct.")


def test_a_blank_stops_before_any_process(tmp_path, monkeypatch):
    blank_starts_no_process(grade_fsdp, tmp_path / "fsdp.py", REFERENCE, "        self.full.untyped_storage().resize_(0)\n",
                            "Unit.free", monkeypatch)


@pytest.mark.parametrize("name", WRONG)
def test_each_wrong_fsdp_is_named(tmp_path, name):
    *edits, named, world_sizes = WRONG[name]
    wrong = edited(REFERENCE, *edits)
    with pytest.raises(ExerciseError, match=named):
        grade_fsdp(fsdp_file(tmp_path, wrong), world_sizes)
