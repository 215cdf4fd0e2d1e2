"""The repeats of the 1-vs-2 comparison: two jobs that stay up and take turns, on real processes; their
weights and losses are a separate train.py run's, bit for bit (two runs with the same seeds are identical)."""

import json
import shutil
import subprocess
import sys

import psutil
import pytest
import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import CorpusError

from minitrain.lab.repeats import TURNS, run_repeats
from minitrain.lab.runs import REPEATS_DIR, read_repeats, repeat_dir
from minitrain.paths import TRAIN_SCRIPT
from minitrain.verify import compare_states

STEPS, WARMUP = 4, 1


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    out = tmp_path_factory.mktemp("repeats")
    run_repeats(out, 2, STEPS, WARMUP)
    return out


def test_they_alternate_1_2_1_2_and_leave_each_repeats_files(repeats):
    found = read_repeats(repeats)
    assert [len(found[1]), len(found[2])] == [2, 2]
    assert all(run.timing == ["hook"] and run.steps == STEPS for runs in found.values() for run in runs)
    order = [(r, n) for r in range(2) for n in (1, 2)]
    finished = [(repeat_dir(repeats, r, n) / "timings.jsonl").stat().st_mtime_ns for r, n in order]
    assert finished == sorted(finished), "the turns did not come 1, 2, 1, 2"
    assert not (repeats / REPEATS_DIR / TURNS).exists()  # the turn files are gone


def losses(folder) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "timings.jsonl").read_text().splitlines()]


def test_a_repeat_is_train_py_timed_by_the_hook_bit_for_bit(repeats, tmp_path):
    """Same seeds, setup and step: both 2-process repeats end with the weights and losses of a separate
    train.py --timing hook run, bit for bit (so two runs with the same seeds are identical)."""
    subprocess.run([sys.executable, "-m", "minitrain.launch", "--nproc-per-node=2", str(TRAIN_SCRIPT),
                    "--out", str(tmp_path), "--steps", str(STEPS), "--warmup", str(WARMUP), "--timing", "hook"],
                   check=True, capture_output=True, timeout=300)
    for repeat in (0, 1):
        for rank in (0, 1):
            mine = torch.load(repeat_dir(repeats, repeat, 2) / f"state-rank-{rank}.pt", weights_only=True)
            script = torch.load(tmp_path / f"state-rank-{rank}.pt", weights_only=True)
            assert compare_states(mine, script).bitwise_equal, (repeat, rank)
        assert losses(repeat_dir(repeats, repeat, 2)) == losses(tmp_path)
    assert len(losses(tmp_path)) == STEPS and losses(tmp_path)[0] != losses(tmp_path)[-1]  # it trained


def test_a_broken_corpus_is_named_before_any_job_starts(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(ensure_corpus(DEFAULT_CORPUS_DIR), corpus)
    (corpus / "train.jsonl").write_text("not json\n")
    with pytest.raises(CorpusError, match="train.jsonl:1: not a JSON object"):
        run_repeats(tmp_path / "out", 1, STEPS, WARMUP, corpus_dir=corpus)
    assert not (tmp_path / "out").exists()


def test_a_turn_past_its_timeout_stops_both_jobs(tmp_path):
    with pytest.raises(TimeoutError, match="did not come within"):
        run_repeats(tmp_path, 1, STEPS, WARMUP, timeout=0.5)
    assert not [p for p in psutil.process_iter(["cmdline"]) if "minitrain.lab.repeats" in " ".join(p.info["cmdline"] or [])]
