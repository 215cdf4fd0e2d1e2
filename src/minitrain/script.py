"""The learner's scripts (train.py, compare_states.py) imported as modules, so the lab's own code calls the
learner's functions rather than keeping copies of their answers; and Block C's two functions called with
their contracts checked, so a broken one is named where it breaks, not by a symptom further on."""

import argparse
import importlib.util
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from minitrain import controls, fault, snapshot
from minitrain.cli import LabArgumentParser, nonnegative_int, output_folder, positive_float, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.data import SEED_BASE
from minitrain.model import MiniGPTConfig
from minitrain.paths import TRAIN_SCRIPT
from minitrain.timing import BY_NAME, VARIANTS
from minitrain.train import TrainConfig

STEP_KEYS = ("loss", "forward_ms", "backward_ms", "optimizer_ms", "step_ms")  # train_step's record, its docstring's


class ContractError(TypeError):
    """setup() or train_step() returned what its docstring rules out; the message names it and the fix."""


def import_script(path: str | Path) -> types.ModuleType:
    """The script at `path` imported as a module named after it, fresh from disk (a notebook's edits count); the one
    way the lab loads a learner's file by its path. It stands in sys.modules, where inspect.getsource looks."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """train.py's options, checked (its `args`: what setup() reads, the extras' flags, --out and the launcher)."""
    p = LabArgumentParser(description="Lab 01, Block C: train MiniGPT with DDP between CPU processes (gloo) and time "
                                         "the all-reduce.")
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--warmup", type=nonnegative_int, default=50, help="steps left out of the summary")
    p.add_argument("--batch-size", type=positive_int, default=TrainConfig.batch_size, help="sequences per rank per step")
    p.add_argument("--block-size", type=positive_int, default=TrainConfig.block_size, help="tokens per sequence")
    p.add_argument("--lr", type=positive_float, default=TrainConfig.lr)
    p.add_argument("--seed", type=int, default=SEED_BASE, help="rank r seeds itself with SEED + r (the sheet: 35000)")
    p.add_argument("--bucket-cap-mb", type=positive_float, default=None,
                   help="DDP's bucket cap in MiB (default: DDP's own, 1 MiB first, then 25 MiB)")
    for name in ("n_layer", "n_head", "n_embd"):
        p.add_argument(f"--{name.replace('_', '-')}", type=positive_int, default=getattr(MiniGPTConfig, name))
    p.add_argument("--out", type=output_folder, default=TRAIN_SCRIPT.parent,
                   help="output folder (default: train.py's folder)")
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--timing", default=",".join(BY_NAME),
                   help="comma-separated timing variants: " + "; ".join(f"{v.name} = {v.label}" for v in VARIANTS))
    p.add_argument("--launcher", choices=["torchrun", "spawn"], default="torchrun")
    p.add_argument("--nproc", type=positive_int, default=2, help="processes, with --launcher spawn")
    controls.add_arguments(p)  # --comm noop, --no-sync, --track-drift
    snapshot.add_arguments(p)  # --snapshot-every
    fault.add_arguments(p)  # --fail-at
    args = p.parse_args(argv)
    args.timing = args.timing.split(",")
    if unknown := [name for name in args.timing if name not in BY_NAME]:
        p.error(f"--timing {','.join(args.timing)}: unknown variant {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup}): "
                "the summary uses the steps after the warm-up")
    if args.n_embd % args.n_head:
        p.error(f"--n-embd ({args.n_embd}) must be a multiple of --n-head ({args.n_head}): "
                "each head gets n_embd / n_head dimensions")
    return args
