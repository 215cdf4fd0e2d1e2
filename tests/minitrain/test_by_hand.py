"""DDP's arithmetic by hand matches a real 2-rank train.py run bit for bit, and names a loop's mistakes."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minitrain.lab.by_hand import ddp_by_hand, judge_run
from minitrain.paths import TRAIN_SCRIPT

STEPS = 3


def run_train(out: Path, script: Path = TRAIN_SCRIPT) -> list[dict]:
    subprocess.run([sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2", str(script), "--out", str(out),
                    "--steps", str(STEPS), "--warmup", "1"], check=True, capture_output=True, timeout=300)
    return [torch.load(out / f"state-rank-{r}.pt", weights_only=True) for r in range(2)]


@pytest.fixture(scope="module")
def reference_states(tmp_path_factory):
    return run_train(tmp_path_factory.mktemp("reference"))


def test_train_py_is_ddps_arithmetic_bit_for_bit(reference_states):
    assert judge_run(reference_states, STEPS) == ""
    untrained = ddp_by_hand(0)
    assert any(not torch.equal(untrained[k], v) for k, v in reference_states[0].items())  # the steps changed it


@pytest.mark.parametrize("mistake, old, new, named", [
    ("no zero_grad", "        optimizer.zero_grad(set_to_none=True)\n", "", "pile up"),
    ("lr 1e-3", "lr=args.lr", "lr=1e-3", "not with DDP's arithmetic"),
    ("no wrap", "    model = wrap_for_ddp(model)\n", "", "different weights"),
])
def test_a_loops_mistake_is_named(tmp_path, mistake, old, new, named):
    text = TRAIN_SCRIPT.read_text()
    assert old in text
    script = tmp_path / "train.py"
    script.write_text(text.replace(old, new))
    if mistake == "no wrap":  # without DDP there is no comm hook to attach: time nothing
        script.write_text(script.read_text().replace("hook = attach_instrumented_hook(model, comm=args.comm)",
                                                     "hook = InstrumentedHook()").replace(
            "timers = {v.field: v.attach(hook) for v in VARIANTS if v.name in args.timing}", "timers = {}").replace(
            "from minitrain.timing import ", "from minitrain.timing import InstrumentedHook, ").replace(
            "with controls.maybe_no_sync(model, args.no_sync):", "if True:"))
    states = run_train(tmp_path / "out", script)
    assert named in judge_run(states, STEPS)
