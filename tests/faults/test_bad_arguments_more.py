"""More bad arguments and settings, tried as a new user would: environment variables, the lab's
launcher, a script rejecting its arguments under the launcher, run.ipynb's papermill parameters.
Each ends at once with one line that names what is wrong and the fix, exit status 2, nothing written."""

import os
import subprocess
import sys

import papermill
import pytest

from conftest import ROOT, TRAIN, launch
from minitrain.lab.execute import execute
from minitrain.launch import LaunchError, run_streaming, torchrun_command

RUN_NOTEBOOK = ROOT / "notebooks" / "run.ipynb"
REJECTED = "error: the script rejected its arguments or input (see the line above)"


def run(args: list[str], env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_line(text: str) -> str:
    """The text, which must be exactly one line."""
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_collective_timeout_is_named_by_train_py(tmp_path, value):
    out = tmp_path / "out"
    proc = run([sys.executable, str(TRAIN), "--out", str(out)], env={"MINITRAIN_COLLECTIVE_TIMEOUT": value})
    assert proc.returncode == 2
    assert f"MINITRAIN_COLLECTIVE_TIMEOUT={value} is not a number of seconds above 0" in one_line(proc.stderr)
    assert "unset it for the default (60 s)" in proc.stderr
    assert proc.stdout == "" and not out.exists()


def test_a_bad_collective_timeout_fails_where_it_is_used_not_at_import():
    env = {"MINITRAIN_COLLECTIVE_TIMEOUT": "abc"}
    assert run([sys.executable, "-c", "import minitrain.ddp, minitrain.launch"], env=env).returncode == 0
    proc = run([sys.executable, "-c", "from minitrain.gloo_setup import collective_timeout; collective_timeout()"], env=env)
    assert proc.stderr.splitlines()[-1] == (
        "minitrain.cli.SettingError: MINITRAIN_COLLECTIVE_TIMEOUT=abc is not a number of seconds above 0: "
        "unset it for the default (60 s), or set e.g. MINITRAIN_COLLECTIVE_TIMEOUT=120")


@pytest.mark.parametrize("env, message", [
    ({"MINITRAIN_COLLECTIVE_TIMEOUT": "abc"}, "MINITRAIN_COLLECTIVE_TIMEOUT=abc is not a number of seconds above 0"),
    ({"MASTER_PORT": "abc"}, "MASTER_PORT=abc is not a TCP port (a whole number from 1 to 65535): unset it"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
], ids=["timeout abc", "port abc", "port 70000"])
def test_the_launcher_names_a_bad_setting_before_starting_anything(tmp_path, env, message):
    proc = launch("--nproc-per-node=2", str(TRAIN), "--out", str(tmp_path / "out"), env=env)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert message in one_line(text)  # no worker started: not even torchrun's OMP_NUM_THREADS notice
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["abc", "70000"])
def test_the_spawn_launcher_names_a_bad_master_port(tmp_path, value):
    out = tmp_path / "out"
    proc = run([sys.executable, str(TRAIN), "--launcher", "spawn", "--out", str(out)], env={"MASTER_PORT": value})
    assert proc.returncode == 2
    assert f"train.py: error: MASTER_PORT={value} is not a TCP port" in one_line(proc.stderr)
    assert not out.exists()


LAUNCHER_BAD = [  # (arguments, what the one line must say)
    (["--nproc-per-node=abc", str(TRAIN), "--out", "{tmp}"], "error: --nproc-per-node=abc is not a whole number of at least 1"),
    (["--nproc-per-node=0", str(TRAIN), "--out", "{tmp}"], "error: --nproc-per-node=0 is not a whole number of at least 1"),
    (["--nproc-per-node=2"], "error: no SCRIPT to run: python -m minitrain.launch --nproc-per-node=N SCRIPT"),
    (["--nproc-per-node=2", "experiments/35-ddp-cpu/trian.py"],
     "error: SCRIPT experiments/35-ddp-cpu/trian.py is not a file: give the path of a Python script"),
]


@pytest.mark.parametrize("args, message", LAUNCHER_BAD, ids=["nproc abc", "nproc 0", "no script", "no such script"])
def test_the_launcher_rejects_a_bad_argument_in_one_line(tmp_path, args, message):
    proc = launch(*(arg.replace("{tmp}", str(tmp_path)) for arg in args))
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert one_line(text).startswith(message), text


def test_a_script_rejecting_its_arguments_ends_the_launch_in_its_own_line_and_one_more(tmp_path):
    proc = launch("--nproc-per-node=2", str(TRAIN), "--batch-size", "0", "--out", str(tmp_path / "out"))
    text, _ = proc.communicate(timeout=120)
    lines = text.splitlines()
    assert proc.returncode == 2
    assert lines[-1] == REJECTED
    assert lines[-2] == "train.py: error: argument --batch-size: 0 is not a whole number of at least 1 (see --help)"
    assert text.count("argument --batch-size") == 1  # from rank 0 only
    for noise in ("failed (exitcode", "closing signal", "Traceback", "ChildFailedError", "the run failed"):
        assert noise not in text, text
    assert not (tmp_path / "out").exists()


def test_a_worker_failing_otherwise_still_gets_the_failure_report(tmp_path):
    """Status 1 (a crash) is not a rejected argument: the launcher names the ranks and how they ended."""
    script = tmp_path / "crash.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['RANK'] == '0':\n    sys.exit(1)\n"
                      "time.sleep(60)\n")
    proc = launch("--nproc-per-node=2", str(script))
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "error: the run failed, rank 0 (pid " in text and ") exited with status 1; rank 1 (pid " in text
    assert REJECTED not in text


def test_run_streaming_raises_the_rejecting_line(tmp_path):
    command = torchrun_command(TRAIN, 2, "--steps", "5", "--warmup", "9", "--out", str(tmp_path / "out"))
    with pytest.raises(LaunchError) as caught:
        run_streaming(command, timeout=120, echo=lambda line: None)
    assert str(caught.value) == ("train.py: error: --steps (5) must be larger than --warmup (9): "
                                 "the summary uses the steps after the warm-up (see --help)")


@pytest.mark.parametrize("parameters, message", [
    ({"nproc": 0}, "nproc = 0 is not a whole number of at least 1: use 1 or 2 (papermill: -p nproc 2)"),
    ({"steps": 50, "warmup": 50}, "steps (50) must be larger than warmup (50)"),
], ids=["nproc 0", "steps not above warmup"])
def test_run_notebook_names_a_bad_parameter_in_one_line(tmp_path, parameters, message):
    out = tmp_path / "out"
    with pytest.raises(papermill.PapermillExecutionError) as caught:
        execute(RUN_NOTEBOOK, tmp_path / "run.ipynb", {**parameters, "out_dir": str(out)})
    error = caught.value
    assert error.ename == "ValueError" and error.evalue.startswith(message) and "\n" not in error.evalue
    assert str(error).rstrip().splitlines()[-1].endswith(error.evalue)  # the cell ends with that line
    assert len(error.traceback) <= 5  # the cell's own raise, no launcher or library frames
    assert not out.exists()


@pytest.mark.parametrize("below", ["", "sub"], ids=["a file", "a folder under a file"])
def test_make_lab_names_a_lab_out_that_is_a_file(tmp_path, below):
    target = tmp_path / "a-file"
    target.write_text("keep me")
    value = str(target / below) if below else str(target)
    proc = run([sys.executable, "-m", "minitrain.lab", "--skip-tests"], env={"MINITRAIN_LAB_OUT": value}, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[-1] == (
        f"python -m minitrain.lab: error: MINITRAIN_LAB_OUT={value} is not a folder ({target} is a file): "
        "unset it for experiments/35-ddp-cpu/, or name a folder (it is created if missing) (see --help)")
    assert "Traceback" not in proc.stderr and target.read_text() == "keep me"
