"""More bad arguments and settings, tried as a new user would: environment variables, the lab's
launcher, a script rejecting its arguments under the launcher, run.ipynb's papermill parameters.
Each ends at once with one line that names what is wrong and the fix, exit status 2, nothing written.
One-line errors are checked in this process (`main(argv)`); new interpreters where only they show it."""

import os
import subprocess
import sys

import papermill
import pytest

from harness import NEW_INTERPRETERS, ROOT, TRAIN, launch
from minitrain import launch as launcher
from minitrain.lab.running.execute_notebook import execute
from minitrain.launch import LaunchError, run_streaming, torchrun_command
from test_bad_arguments import train_script  # noqa: F401 (a fixture: train.py imported in this process)

RUN_NOTEBOOK = ROOT / "notebooks" / "run.ipynb"
REJECTED = "error: the script rejected its arguments or input (see the line above)"


def run(args: list[str], env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_line(text: str) -> str:
    """The text, which must be exactly one line."""
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return text


def rejected_in_process(main, argv: list[str], capfd) -> str:
    """`main(argv)` in this process must exit with status 2, print nothing to stdout, and exactly one
    line (returned) to stderr; capfd: a worker it started would print there too."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out, err = capfd.readouterr()
    assert exit_.value.code == 2 and out == "", out + err
    return one_line(err)


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_collective_timeout_is_named_by_train_py(train_script, tmp_path, monkeypatch, capfd, value):
    out = tmp_path / "out"
    monkeypatch.setenv("MINITRAIN_COLLECTIVE_TIMEOUT", value)
    err = rejected_in_process(train_script.main, ["--out", str(out)], capfd)
    assert f"MINITRAIN_COLLECTIVE_TIMEOUT={value} is not a number of seconds above 0" in err
    assert "unset it for the default (60 s)" in err
    assert not out.exists()


def test_a_bad_collective_timeout_fails_where_it_is_used_not_at_import():
    """A new interpreter: the imports succeed (it prints "imported"), the first use fails."""
    code = ("import minitrain.ddp, minitrain.launch\nprint('imported', flush=True)\n"
            "from minitrain.gloo_setup import collective_timeout\ncollective_timeout()")
    proc = run([sys.executable, "-c", code], env={"MINITRAIN_COLLECTIVE_TIMEOUT": "abc"})
    assert proc.stdout == "imported\n", proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "minitrain.cli.SettingError: MINITRAIN_COLLECTIVE_TIMEOUT=abc is not a number of seconds above 0: "
        "unset it for the default (60 s), or set e.g. MINITRAIN_COLLECTIVE_TIMEOUT=120")


def test_the_launcher_names_a_bad_setting_before_starting_anything(tmp_path):
    """End to end, in a new interpreter."""
    proc = launch("--nproc-per-node=2", str(TRAIN), "--out", str(tmp_path / "out"),
                  env={"MINITRAIN_COLLECTIVE_TIMEOUT": "abc"})
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "MINITRAIN_COLLECTIVE_TIMEOUT=abc is not a number of seconds above 0" in one_line(text)
    assert not (tmp_path / "out").exists()  # no worker started: not even torchrun's OMP_NUM_THREADS notice


@pytest.mark.parametrize("env, message", [
    ({"MASTER_PORT": "abc"}, "MASTER_PORT=abc is not a TCP port (a whole number from 1 to 65535): unset it"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
], ids=["port abc", "port 70000"])
def test_the_launcher_names_a_bad_port_before_starting_anything(tmp_path, monkeypatch, capfd, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    err = rejected_in_process(launcher.main, ["--nproc-per-node=2", str(TRAIN), "--out", str(tmp_path / "out")], capfd)
    assert message in err  # no worker started: not even torchrun's OMP_NUM_THREADS notice
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["abc", "70000"])
def test_the_spawn_launcher_names_a_bad_master_port(train_script, tmp_path, monkeypatch, capfd, value):
    out = tmp_path / "out"
    monkeypatch.setenv("MASTER_PORT", value)
    monkeypatch.setattr(sys, "argv", [str(TRAIN)])  # argparse names the program after argv[0], as when run
    err = rejected_in_process(train_script.main, ["--launcher", "spawn", "--out", str(out)], capfd)
    assert f"train.py: error: MASTER_PORT={value} is not a TCP port" in err
    assert not out.exists()


LAUNCHER_BAD = [  # (arguments, what the one line must say)
    (["--nproc-per-node=abc", str(TRAIN), "--out", "{tmp}"], "error: --nproc-per-node=abc is not a whole number of at least 1"),
    (["--nproc-per-node=0", str(TRAIN), "--out", "{tmp}"], "error: --nproc-per-node=0 is not a whole number of at least 1"),
    (["--nproc-per-node=2"], "error: no SCRIPT to run: python -m minitrain.launch --nproc-per-node=N SCRIPT"),
    (["--nproc-per-node=2", "experiments/35-ddp-cpu/trian.py"],
     "error: SCRIPT experiments/35-ddp-cpu/trian.py is not a file: give the path of a Python script"),
]


@pytest.mark.parametrize("args, message", LAUNCHER_BAD, ids=["nproc abc", "nproc 0", "no script", "no such script"])
def test_the_launcher_rejects_a_bad_argument_in_one_line(tmp_path, monkeypatch, capfd, args, message):
    monkeypatch.chdir(ROOT)
    err = rejected_in_process(launcher.main, [arg.replace("{tmp}", str(tmp_path)) for arg in args], capfd)
    assert err.startswith(message), err


def test_a_script_rejecting_its_arguments_ends_the_launch_in_its_own_line_and_one_more(tmp_path):
    """Under the lab's launcher, streamed: run_streaming raises the rejecting line (exit status 2)."""
    lines: list[str] = []
    command = torchrun_command(TRAIN, 2, "--batch-size", "0", "--out", str(tmp_path / "out"))
    with pytest.raises(LaunchError) as caught:
        run_streaming(command, timeout=120, echo=lines.append)
    text = "\n".join(lines)
    assert str(caught.value) == "train.py: error: argument --batch-size: 0 is not a whole number of at least 1 (see --help)"
    assert lines[-1] == REJECTED
    assert lines[-2] == str(caught.value)
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
    proc = launch("--nproc-per-node=2", str(script), env=NEW_INTERPRETERS)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "error: the run failed, rank 0 (pid " in text and ") exited with status 1; rank 1 (pid " in text
    assert REJECTED not in text


def test_run_notebook_names_a_bad_parameter_in_one_line(tmp_path):
    """The parameters cell raises run_parameters_problem's one line (each problem's line: test_per_os.py)."""
    out = tmp_path / "out"
    with pytest.raises(papermill.PapermillExecutionError) as caught:
        execute(RUN_NOTEBOOK, tmp_path / "run.ipynb", {"nproc": 0, "out_dir": str(out)})
    error = caught.value
    message = "nproc = 0 is not a whole number of at least 1: use 1 or 2 (papermill: -p nproc 2)"
    assert error.ename == "ValueError" and error.evalue.startswith(message) and "\n" not in error.evalue
    assert str(error).rstrip().splitlines()[-1].endswith(error.evalue)  # the cell ends with that line
    assert len(error.traceback) <= 5  # the cell's own raise, no launcher or library frames
    assert not out.exists()


LAB_OUT_A_FILE = ("python -m minitrain.lab: error: MINITRAIN_LAB_OUT={value} is not a folder ({target} is a file): "
                  "unset it for the lab's default folder, or name a folder (it is created if missing) (see --help)")


def test_make_lab_names_a_lab_out_that_is_a_file(tmp_path):
    """End to end, in a new interpreter: `python -m minitrain.lab` (what `make lab` runs)."""
    target = tmp_path / "a-file"
    target.write_text("keep me")
    proc = run([sys.executable, "-m", "minitrain.lab", "--skip-tests"], env={"MINITRAIN_LAB_OUT": str(target)}, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == LAB_OUT_A_FILE.format(value=target, target=target)
    assert "Traceback" not in proc.stderr and target.read_text() == "keep me"


def test_make_lab_names_a_lab_out_below_a_file(tmp_path, monkeypatch, capfd):
    from minitrain.lab.running.make_lab import main

    target = tmp_path / "a-file"
    target.write_text("keep me")
    monkeypatch.setenv("MINITRAIN_LAB_OUT", str(target / "sub"))
    err = rejected_in_process(main, ["--skip-tests"], capfd)
    assert err == LAB_OUT_A_FILE.format(value=target / "sub", target=target) + "\n"
    assert target.read_text() == "keep me"
