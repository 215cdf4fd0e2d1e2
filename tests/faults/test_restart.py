"""A rank dies mid-run and torchrun's elastic agent restarts the workers (--max-restarts=1): they
resume from the last snapshot and end with bitwise the weights of a run that never failed; a
damaged newest snapshot is named and skipped; a snapshot of other settings is refused. Real
processes, a tiny model. The fault flag's restart (`--fail-at`) and a second fault past
--max-restarts are the restart measurement's runs: test_restart_measure.py checks them there."""

import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from harness import NEW_INTERPRETERS, TRAIN, launch, wait_for_line
from test_bad_arguments import train_script  # noqa: F401 (a fixture: train.py imported in this process)
from minitrain.launch import run_ranks
from minitrain.measure.measurement import runs_folder
from minitrain.measure.restart import QUICK
from minitrain.snapshot import MARKER, SNAPSHOTS, step_folder
from minitrain.verify import compare_state_files

STEPS, EVERY = QUICK.steps, QUICK.snapshot_every
SMALL = QUICK.train_args()  # the restart measurement's quick runs: its uninterrupted one is the reference


def train(out, corpus_dir, *extra: str, restarts: int = 1, env: dict | None = None):
    """The lab's launcher on train.py, tiny and with snapshots; `extra` after train.py's arguments."""
    return launch("--nproc-per-node=2", f"--max-restarts={restarts}", str(TRAIN), *SMALL, "--out", str(out),
                  "--corpus-dir", str(corpus_dir), *extra, env=env)


def finish(proc, timeout: float = 180) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def run_json(folder) -> dict:
    return json.loads((folder / "run.json").read_text())


def losses(folder) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "timings.jsonl").read_text().splitlines()]


def assert_same_weights(reference, folder) -> None:
    """Both ranks' final state dicts bitwise equal to the reference run's, and the loss logs equal."""
    for rank in range(2):
        c = compare_state_files(reference / f"state-rank-{rank}.pt", folder / f"state-rank-{rank}.pt")
        assert c.bitwise_equal, c.table()
    assert losses(folder) == losses(reference)


@pytest.fixture
def reference(restart_runs) -> Path:
    """The same run, uninterrupted: the restart measurement's (tests/conftest.py), made with QUICK's
    settings, which SMALL repeats."""
    out, results = restart_runs
    folder = runs_folder(out, "restart") / "uninterrupted"
    assert run_json(folder)["restart"]["attempt"] == 0
    return folder


def test_an_outside_sigkill_restarts_the_same_way(tmp_path, corpus_dir, reference, reap):
    out = tmp_path / "killed"
    proc = train(out, corpus_dir, env=NEW_INTERPRETERS)
    reap(proc)
    lines = wait_for_line(proc, "step    9 ")
    rank1 = int(re.search(r"\[rank 1\] pid (\d+)", "".join(lines)).group(1))
    os.kill(rank1, signal.SIGKILL)
    status, log = finish(proc)
    assert status == 0, "".join(lines) + log
    assert f"failed (exitcode: -9) local_rank: 1 (pid: {rank1})" in log
    restart = run_json(out)["restart"]
    assert restart["attempt"] == 1 and restart["resumed_from_step"] % EVERY == 0
    assert restart["resumed_from_step"] >= 8 and restart["steps_redone"] >= 0
    assert_same_weights(reference, out)


def test_a_snapshot_interrupted_mid_write_is_named_and_the_previous_one_used(tmp_path, corpus_dir, reference):
    """What a write interrupted by a kill leaves: the newest folder with rank 0's file, rank 1's still a
    temporary file, no COMPLETE marker. The run names it, resumes from the one before, ends equal. No fault and no
    restart: the lab's runs (run_ranks, warm under the tests)."""
    out = tmp_path / "resumed"
    shutil.copytree(reference / SNAPSHOTS, out / SNAPSHOTS)
    newest = step_folder(out / SNAPSHOTS, STEPS)
    (newest / MARKER).unlink()
    (newest / "rank-1.pt").rename(newest / ".rank-1.pt.x1y2z3.tmp")
    lines: list[str] = []
    run_ranks(TRAIN, 2, *SMALL, "--out", str(out), "--corpus-dir", str(corpus_dir), timeout=180, echo=lines.append)
    log = "\n".join(lines)
    assert f"step-{STEPS:06d} skipped: no COMPLETE marker: interrupted while it was written" in log
    assert f"step-{STEPS - EVERY:06d}: step {STEPS - EVERY} of {STEPS}" in log
    assert run_json(out)["restart"]["resumed_from_step"] == STEPS - EVERY
    assert_same_weights(reference, out)


def test_a_snapshot_of_another_configuration_is_refused_in_one_line(tmp_path, corpus_dir, reference, reap):
    out = tmp_path / "other"
    shutil.copytree(reference / SNAPSHOTS, out / SNAPSHOTS)
    proc = train(out, corpus_dir, "--batch-size", "8", restarts=0)
    reap(proc)
    status, log = finish(proc)
    assert status == 2, log
    assert "error: the script rejected its arguments or input" in log
    assert re.search(r"\[rank 0\] error: \S*step-0000\d\d was taken with batch_size 16 \(this run: 8\)", log), log
    assert not (out / "run.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--fail-at", "6"], "argument --fail-at: '6' is not STEP:RANK or STEP:RANK:ATTEMPT (whole numbers), e.g. 6:1"),
    (["--fail-at", "6:-1"], "argument --fail-at: '6:-1' is not STEP:RANK"),
    (["--snapshot-every", "0"], "argument --snapshot-every: 0 is not a whole number of at least 1"),
])
def test_a_bad_snapshot_or_fault_argument_is_refused_in_one_line(train_script, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        train_script.main([*args, "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_without_the_flags_nothing_changes(train_script):
    args = train_script.parse_args([])
    assert args.snapshot_every is None and args.fail_at is None  # no snapshot, no restart record, no fault
    assert train_script.parse_args(["--fail-at", "6:1", "--fail-at", "7:0:1"]).fail_at == [(6, 1, 0), (7, 0, 1)]
