"""The repeats of the 1-vs-2 comparison: two jobs that stay up and take turns, on real processes; their
weights and losses are the sheet's 2-process train.py run's, bit for bit (two runs with the same seeds
are identical, however they are timed). The runs are the session's experiment (conftest.py)."""

import json
import shutil
import threading

import psutil
import pytest
import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import CorpusError

from minitrain.lab.reporting.runs import REPEATS_DIR, read_repeats, repeat_dir, run_dir_in
from minitrain.lab.running.alternating_repeats import TURNS, run_repeats
from minitrain.launch.warm import WARM, WARM_JOB
from minitrain.verify import compare_states

from helpers import EXPERIMENT_REPEATS, EXPERIMENT_STEPS

STEPS, WARMUP = 4, 1


def test_they_alternate_1_2_1_2_and_leave_each_repeats_files(experiment_run):
    found = read_repeats(experiment_run)
    assert [len(found[1]), len(found[2])] == [EXPERIMENT_REPEATS] * 2
    assert all(run.timing == ["hook"] and run.steps == EXPERIMENT_STEPS for runs in found.values() for run in runs)
    order = [(r, n) for r in range(EXPERIMENT_REPEATS) for n in (1, 2)]
    finished = [(repeat_dir(experiment_run, r, n) / "timings.jsonl").stat().st_mtime_ns for r, n in order]
    assert finished == sorted(finished), "the turns did not come 1, 2, 1, 2"
    assert not (experiment_run / REPEATS_DIR / TURNS).exists()  # the turn files are gone


def losses(folder) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "timings.jsonl").read_text().splitlines()]


def test_a_repeat_is_train_py_bit_for_bit(experiment_run):
    """Same seeds, setup and step: every 2-process repeat (timed by the comm hook only) ends with the
    weights and losses of the sheet's 2-process train.py run (timed both ways), bit for bit."""
    sheet = run_dir_in(experiment_run, 2)
    for repeat in range(EXPERIMENT_REPEATS):
        for rank in (0, 1):
            mine = torch.load(repeat_dir(experiment_run, repeat, 2) / f"state-rank-{rank}.pt", weights_only=True)
            script = torch.load(sheet / f"state-rank-{rank}.pt", weights_only=True)
            assert compare_states(mine, script).bitwise_equal, (repeat, rank)
        assert losses(repeat_dir(experiment_run, repeat, 2)) == losses(sheet)
    assert len(losses(sheet)) == EXPERIMENT_STEPS and losses(sheet)[0] != losses(sheet)[-1]  # it trained


def test_a_broken_corpus_is_named_before_any_job_starts(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(ensure_corpus(DEFAULT_CORPUS_DIR), corpus)
    (corpus / "train.jsonl").write_text("not json\n")
    with pytest.raises(CorpusError, match="train.jsonl:1: not a JSON object"):
        run_repeats(tmp_path / "out", 1, STEPS, WARMUP, corpus_dir=corpus)
    assert not (tmp_path / "out").exists()


def left_behind(tmp_path) -> list[psutil.Process]:
    """The jobs' processes still alive 5 s on: the lab's torchrun's (their command line names the folder), or warm
    ranks (children of this process's forkserver, whose command line they share)."""
    mine = lambda cmdline: "minitrain.lab.repeats" in cmdline and str(tmp_path) in cmdline  # noqa: E731 (not another lab's)
    launched = [p for p in psutil.process_iter(["cmdline"]) if mine(" ".join(p.info["cmdline"] or []))]
    forkservers = [p for p in psutil.Process().children() if "multiprocessing.forkserver" in " ".join(p.cmdline())]
    return psutil.wait_procs(launched + [rank for f in forkservers for rank in f.children()], timeout=5)[1]


@pytest.mark.parametrize("warm", ["0", "1"], ids=["the lab's torchrun", "warm ranks"])
def test_a_turn_past_its_timeout_stops_both_jobs(tmp_path, monkeypatch, warm):
    """Either way the jobs start (launch.warm.start_ranks), a stop leaves nothing running and nothing about to start."""
    monkeypatch.setenv(WARM, warm)
    with pytest.raises(TimeoutError, match="did not come within"):
        run_repeats(tmp_path, 1, STEPS, WARMUP, timeout=0.05)  # warm ranks get ready in a fraction of a second
    assert [t.name for t in threading.enumerate() if t.name.startswith(WARM_JOB)] == []
    assert left_behind(tmp_path) == []
