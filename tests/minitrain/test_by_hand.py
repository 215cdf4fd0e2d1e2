"""DDP's arithmetic by hand matches a real 2-rank train.py run bit for bit, and names a loop's mistakes."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from helpers import EXPERIMENT_STEPS
from minitrain.lab.by_hand import ddp_by_hand, judge_run
from minitrain.lab.runs import run_dir_in
from minitrain.paths import TRAIN_SCRIPT

STEPS = 3


def run_train(out: Path, script: Path = TRAIN_SCRIPT) -> list[dict]:
    subprocess.run([sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2", str(script), "--out", str(out),
                    "--steps", str(STEPS), "--warmup", "1"], check=True, capture_output=True, timeout=300)
    return [torch.load(out / f"state-rank-{r}.pt", weights_only=True) for r in range(2)]


def test_train_py_is_ddps_arithmetic_bit_for_bit(experiment_run, corpus_dir):
    """The sheet's 2-process run of the session's experiment (conftest.py), held to the arithmetic by hand."""
    states = [torch.load(run_dir_in(experiment_run, 2) / f"state-rank-{r}.pt", weights_only=True) for r in range(2)]
    assert judge_run(states, EXPERIMENT_STEPS, corpus_dir) == ""
    untrained = ddp_by_hand(0, corpus_dir)
    assert any(not torch.equal(untrained[k], v) for k, v in states[0].items())  # the steps changed it


MISTAKES = {  # a loop's mistake: (what train.py had, what the learner wrote, what judge_run must name)
    "no zero_grad": ("        optimizer.zero_grad(set_to_none=True)\n", "", "pile up"),
    "lr 1e-3": ("lr=args.lr", "lr=1e-3", "not with DDP's arithmetic"),
    "no wrap": ("    model = wrap_for_ddp(model)\n", "", "different weights"),
}
NO_WRAP_TOO = [  # without DDP there is no comm hook to attach: time nothing, no no_sync()
    ("hook = attach_instrumented_hook(model, comm=args.comm)", "hook = InstrumentedHook()"),
    ("timers = {v.field: v.attach(hook) for v in VARIANTS if v.name in args.timing}", "timers = {}"),
    ("from minitrain.timing import ", "from minitrain.timing import InstrumentedHook, "),
    ("with controls.maybe_no_sync(model, args.no_sync):", "if True:"),
]


def test_a_loops_mistakes_are_named(tmp_path):
    """Each mistaken train.py runs for real on 2 ranks, the three side by side."""
    scripts = {}
    for mistake, (old, new, _) in MISTAKES.items():
        text = TRAIN_SCRIPT.read_text()
        assert old in text
        text = text.replace(old, new)
        for a, b in NO_WRAP_TOO if mistake == "no wrap" else []:
            text = text.replace(a, b)
        scripts[mistake] = tmp_path / mistake.replace(" ", "-") / "train.py"
        scripts[mistake].parent.mkdir()
        scripts[mistake].write_text(text)
    with ThreadPoolExecutor(len(scripts)) as pool:
        states = dict(zip(scripts, pool.map(lambda s: run_train(s.parent / "out", s), scripts.values())))
    for mistake, (_, _, named) in MISTAKES.items():
        assert named in judge_run(states[mistake], STEPS), mistake
