"""03-wrapping's grader: rank1_holds_rank0_init(before_rank0, after_rank1) -> bool, on the wrap
demo's real state dicts and on pairs that catch the common mistakes."""

import math
from collections.abc import Callable
from pathlib import Path

import torch

from minitrain.data import SEED_BASE
from minitrain.lab.graders.running import ExerciseError, _call, _keys_checked
from minitrain.lab.wrapdemo import state_path
from minitrain.verify import load_state


def _expect_bool(fn: Callable, a: dict, b: dict, shown: str) -> bool:
    result = _call(fn, f"{fn.__name__}({shown})", a, b)
    if not isinstance(result, bool):
        hint = " (a tensor: use torch.equal, which returns a bool)" if isinstance(result, torch.Tensor) else ""
        raise ExerciseError(f"{fn.__name__} returned {type(result).__name__}{hint}: return True or False")
    return result


def grade_rank1_holds_rank0_init(fn: Callable[[dict, dict], bool], folder: Path) -> str:
    """True for the real pair (rank 0 before wrapping, rank 1 after), False for rank 1's own init,
    and right on pairs that catch a tolerance, a partial comparison and key mistakes."""
    before0, after1 = load_state(state_path(folder, "before", 0)), load_state(state_path(folder, "after", 1))
    before1 = load_state(state_path(folder, "before", 1))
    if not _expect_bool(fn, before0, after1, "before_rank0, after_rank1"):
        raise ExerciseError(f"{fn.__name__} says rank 1 does not hold rank 0's initial weights after wrapping, "
                            "but it does, bit for bit (DDP's constructor broadcast them)")
    if _expect_bool(fn, before0, before1, "before_rank0, before_rank1"):
        raise ExerciseError(f"{fn.__name__} says rank 1's own initial weights (seed {SEED_BASE + 1}) equal "
                            f"rank 0's (seed {SEED_BASE}); they differ in every randomly initialized matrix")
    name = next(k for k, v in after1.items() if v.is_floating_point() and v.numel())
    nudged = dict(after1)
    nudged[name] = after1[name].clone()
    nudged[name].view(-1)[0] = torch.nextafter(nudged[name].view(-1)[0], torch.tensor(math.inf))
    if _expect_bool(fn, before0, nudged, "a pair one float step apart"):
        raise ExerciseError(f"tolerance instead of bit for bit: a copy whose {name!r}[0] is one float step "
                            f"({(nudged[name].view(-1)[0] - after1[name].view(-1)[0]).item():.1e}) away passed; "
                            "the broadcast copies the bytes, so compare with torch.equal, not allclose")
    for name in after1:
        changed = dict(after1)
        changed[name] = after1[name] + 1
        if _expect_bool(fn, before0, changed, f"a pair that differs only in {name!r}"):
            raise ExerciseError(f"not every tensor compared: a copy that differs only in {name!r} passed; "
                                f"compare all {len(after1)} tensors")
    reordered = dict(reversed(after1.items()))
    if not _expect_bool(fn, before0, reordered, "the same tensors in another key order"):
        raise ExerciseError("compared by position: the same tensors with the keys in another order failed; "
                            "match the tensors by name (a state dict is a mapping, not a list)")
    for shown, other in (("a copy missing the last tensor", dict(list(after1.items())[:-1])),
                         ("a copy with an extra tensor", {**after1, "extra.weight": torch.zeros(1)})):
        if _keys_checked(lambda: _expect_bool(fn, before0, other, shown), shown):
            raise ExerciseError(f"wrong keys: {shown} passed; check that both state dicts hold the same names")
    prefixed = {f"module.{k}": v for k, v in after1.items()}
    if _keys_checked(lambda: _expect_bool(fn, before0, prefixed, "a copy with `module.` keys"), "module. keys"):
        raise ExerciseError("only the common keys compared: against the same tensors under `module.`-prefixed names "
                            "(a DDP-wrapped model's state_dict) no name is shared, nothing was compared, and it "
                            "passed; the key sets must be equal, not just overlap")
    return (f"{fn.__name__}: correct. Rank 1 after wrapping holds rank 0's initial weights, all "
            f"{len(after1)} tensors bit for bit; rank 1's own initial weights do not; and the check catches "
            "one float step, any single tensor, and different key sets")
