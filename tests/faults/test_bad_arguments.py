"""Bad arguments, tried as a new user would: each ends at once with one line that names the
argument and the fix, exit status 2, and nothing written. Each command's parsing runs in this
process (its `main(argv)`); one new interpreter per script shows the same end to end."""

import importlib
import importlib.util
import runpy
import subprocess
import sys

import pytest
import torch

from harness import ROOT, TRAIN

COMPARE = ROOT / "experiments" / "35-ddp-cpu" / "compare_states.py"

BAD = [  # (arguments, what the one line must say)
    (["--batch-size", "0"], "argument --batch-size: 0 is not a whole number of at least 1"),
    (["--lr", "-1"], "argument --lr: -1 is not a number above 0"),
    (["--lr", "nan"], "argument --lr: nan is not a number above 0"),
    (["--steps", "0"], "argument --steps: 0 is not a whole number of at least 1"),
    (["--warmup", "-3"], "argument --warmup: -3 is not a whole number of at least 0"),
    (["--steps", "5", "--warmup", "9"], "--steps (5) must be larger than --warmup (9)"),
    (["--steps", "10"], "--steps (10) must be larger than --warmup (50)"),  # the default warm-up
    (["--block-size", "0"], "argument --block-size: 0 is not a whole number of at least 1"),
    (["--n-head", "0"], "argument --n-head: 0 is not a whole number of at least 1"),
    (["--n-embd", "10"], "--n-embd (10) must be a multiple of --n-head (4)"),
    (["--timing", "stopwatch"], "--timing stopwatch: unknown variant stopwatch; choose from barrier, hook"),
    (["--launcher", "spawn", "--nproc", "0"], "argument --nproc: 0 is not a whole number of at least 1"),
]


@pytest.fixture(scope="module")
def train_script():
    """experiments/35-ddp-cpu/train.py as a module: its argument parsing runs in this process."""
    spec = importlib.util.spec_from_file_location("train_script", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_train_rejects_a_bad_argument_in_one_line(train_script, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        train_script.main([*args, "--out", str(out)])
    captured = capsys.readouterr()
    assert exit_.value.code == 2
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err
    assert captured.out == "" and not out.exists()  # nothing written, not even the folder


def test_a_bad_argument_ends_the_script_itself_with_status_2(tmp_path):
    """The same rule end to end, as a user types it: a new interpreter, exit status 2, one line."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(TRAIN), "--batch-size", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--batch-size: 0" in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_out_naming_a_file(train_script, tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("keep me")
    with pytest.raises(SystemExit) as exit_:
        train_script.main(["--out", str(target)])
    assert exit_.value.code == 2 and "is a file, not a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def compare_states(monkeypatch, *args: str) -> int:
    """compare_states.py run in this process as `python compare_states.py ARGS` runs it; its exit status."""
    monkeypatch.setattr(sys, "argv", [str(COMPARE), *args])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(COMPARE), run_name="__main__")
    return exit_.value.code


BROKEN = "state-rank-0.pt is not a state file: truncated or corrupted"


@pytest.fixture
def state(tmp_path) -> bytes:
    """A state file's bytes, as torch.save writes them."""
    torch.save({"weight": torch.ones(4000)}, tmp_path / "state.pt")
    return (tmp_path / "state.pt").read_bytes()


def test_compare_states_names_a_truncated_state_file(tmp_path, state):
    """End to end, in a new interpreter."""
    (tmp_path / "state-rank-0.pt").write_bytes(state[:5000])
    (tmp_path / "state-rank-1.pt").write_bytes(state)
    proc = subprocess.run([sys.executable, str(COMPARE), str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and BROKEN in proc.stderr
    assert "Please file an issue" not in proc.stderr and "Traceback" not in proc.stderr


def test_compare_states_names_a_foreign_file(tmp_path, state, monkeypatch, capsys):
    (tmp_path / "state-rank-0.pt").write_bytes(b"not a tensor file\n")
    (tmp_path / "state-rank-1.pt").write_bytes(state)
    assert compare_states(monkeypatch, str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert BROKEN in err and "Please file an issue" not in err and "Traceback" not in err


def test_compare_states_help_is_help(monkeypatch, capsys):
    assert compare_states(monkeypatch, "--help") == 0
    assert capsys.readouterr().out.startswith("usage:")


OUT = "{tmp}"  # every command below writes into the test's folder, were its rule ever to let it run
LAB_COMMANDS = [  # (module, arguments, environment, what the one line must say)
    ("minitrain.measure.scaling_matrix", ["--repeats", "0", "--out", OUT], {},
     "argument --repeats: 0 is not a whole number of at least 1"),
    ("minitrain.measure.control_runs", ["--steps", "-1", "--out", OUT], {}, "argument --steps: -1 is not a whole number of at least 1"),
    ("minitrain.measure.allreduce_bench", ["--out", "README.md"], {}, "argument --out: README.md is a file, not a folder"),
    ("minitrain.measure.bench", ["--repeats", "0", "--skip-lab"], {"MINITRAIN_LAB_OUT": OUT},
     "argument --repeats: 0 is not a whole number of at least 1"),
    ("minitrain.lab.experiment", ["--repeats", "0", "--out", OUT], {}, "argument --repeats: 0 is not a whole number of at least 1"),
    ("minitrain.lab.runner", [], {"MINITRAIN_LAB_OUT": "README.md"}, "MINITRAIN_LAB_OUT=README.md is not a folder"),
    ("minitrain.lab.runner", ["--commit"], {"MINITRAIN_LAB_OUT": OUT},
     "--commit writes experiments/35-ddp-cpu/, but MINITRAIN_LAB_OUT="),
]


@pytest.mark.parametrize("module, args, env, message", LAB_COMMANDS, ids=[f"{m} {' '.join(a)}" for m, a, _, _ in LAB_COMMANDS])
def test_lab_commands_reject_a_bad_argument_in_one_line(tmp_path, monkeypatch, capsys, module, args, env, message):
    """`python -m MODULE ARGS` as its main(ARGS) in this process (minitrain.lab's is
    minitrain.lab.running.make_lab's)."""
    fill = lambda text: text.replace(OUT, str(tmp_path))  # noqa: E731
    monkeypatch.chdir(ROOT)
    for name, value in env.items():
        monkeypatch.setenv(name, fill(value))
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main([*map(fill, args)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and message in err, err
