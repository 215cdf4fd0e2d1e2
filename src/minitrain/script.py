"""The learner's scripts (train.py, compare_states.py) imported as modules, so the lab's own code calls the
learner's functions rather than keeping copies of their answers; and Block C's two functions called with
their contracts checked, so a broken one is named where it breaks, not by a symptom further on."""

import importlib.util
import math
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minitrain.paths import TRAIN_SCRIPT

STEP_KEYS = ("loss", "forward_ms", "backward_ms", "optimizer_ms", "step_ms")  # train_step's record, its docstring's


class ContractError(TypeError):
    """setup() or train_step() returned what its docstring rules out; the message names it and the fix."""


def import_script(path: str | Path) -> types.ModuleType:
    """The script at `path` imported as a module named after it, fresh from disk (a notebook's edits count)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train_script() -> types.ModuleType:
    """experiments/35-ddp-cpu/train.py, Block C's `setup` and `train_step` in it."""
    return import_script(TRAIN_SCRIPT)


def run_setup(setup: Callable, args: Any, wrap: Callable[[torch.nn.Module], torch.nn.Module]) -> tuple:
    """setup(args, wrap): (rank, world_size, model, shard, optimizer), the model being what `wrap` returned."""
    wrapped = []

    def recorded(model: torch.nn.Module) -> torch.nn.Module:
        wrapped.append(wrap(model))
        return wrapped[-1]
    got = setup(args, recorded)
    if not (isinstance(got, tuple) and len(got) == 5):
        shown = f"a tuple of {len(got)} items" if isinstance(got, tuple) else type(got).__name__
        raise ContractError(f"train.py's setup() returned {shown}: return the 5-tuple "
                            "(rank, world_size, model, shard, optimizer)")
    if not wrapped:
        raise ContractError("train.py's setup() never called its `wrap` argument: wrap the model with wrap(model), "
                            "not wrap_for_ddp(model) (the lab passes other wrappers: --bucket-cap-mb, notebook 15)")
    if got[2] is not wrapped[-1]:
        raise ContractError("train.py's setup() returned another model than the one wrap(model) returned: "
                            "return the wrapped model (its forward is where DDP prepares the all-reduce)")
    if not isinstance(got[4], torch.optim.Optimizer):
        raise ContractError(f"train.py's setup() returned a {type(got[4]).__name__} as the optimizer: "
                            "return torch.optim.AdamW(model.parameters(), lr=args.lr)")
    return got


def run_step(train_step: Callable, *args: Any) -> dict[str, float]:
    """train_step(*args): its record, exactly STEP_KEYS, each a finite number (an int or a float: not a tensor),
    returned as floats."""
    record = train_step(*args)
    if not isinstance(record, dict) or set(record) != set(STEP_KEYS):
        got = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ContractError(f"train.py's train_step() returned {got}: return a dict with exactly the keys "
                            f"{', '.join(STEP_KEYS)} (the loop adds step and tokens)")
    number = {k: isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in record.items()}
    bad = {k: v for k, v in record.items() if not number[k] or not math.isfinite(v)}
    if bad:
        shown = ", ".join(f"{k} = {v}" if number[k] else f"{k} as a {type(v).__name__}" for k, v in bad.items())
        raise ContractError(f"train.py's train_step() returned {shown}: each value must be a finite float "
                            "(loss.item(), not the loss tensor; times as (t1 - t0) * 1e3)")
    return {k: float(v) for k, v in record.items()}
