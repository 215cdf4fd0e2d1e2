"""Bad corpus files and bad arguments: each ends the run with a message naming the problem and the fix."""

import shutil
import subprocess
import sys

import pytest

from conftest import TRAIN, launch


def run_train(*args: str, nproc: int = 2) -> tuple[int, str]:
    proc = launch(f"--nproc-per-node={nproc}", str(TRAIN), *args)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


@pytest.fixture
def bad_corpus(tmp_path, corpus_dir):
    """A copy of the corpus to break, and the arguments that train on it."""
    folder = tmp_path / "corpus"
    shutil.copytree(corpus_dir, folder)
    return folder, ["--corpus-dir", str(folder), "--out", str(tmp_path / "out"), "--steps", "3", "--warmup", "1"]


def test_missing_corpus(tmp_path):
    status, out = run_train("--corpus-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert status != 0
    assert f"{tmp_path / 'nowhere'}" in out and "does not exist" in out
    assert "python -m minitrain.corpus --out" in out
    assert not (tmp_path / "out" / "timings.jsonl").exists()


def test_malformed_json_line(bad_corpus):
    folder, args = bad_corpus
    with open(folder / "train.jsonl", "a") as f:
        f.write('{"text": "The dog sleeps ."\n')
    status, out = run_train(*args)
    assert status != 0
    assert f"{folder / 'train.jsonl'}:24001: not a JSON object" in out


def test_non_utf8_file(bad_corpus):
    folder, args = bad_corpus
    data = (folder / "train.jsonl").read_bytes().splitlines(keepends=True)
    data[6] = b'{"text": "The caf\xe9 opens ."}\n'
    (folder / "train.jsonl").write_bytes(b"".join(data))
    status, out = run_train(*args)
    assert status != 0
    assert f"{folder / 'train.jsonl'}:7: not UTF-8 text" in out


def test_more_processes_than_sentences(bad_corpus):
    folder, args = bad_corpus
    (folder / "train.jsonl").write_text('{"text": "The dog sleeps ."}\n')
    status, out = run_train(*args)
    assert status != 0
    assert "rank 1 gets an empty shard" in out and "use at most 1 processes" in out


def test_steps_not_above_the_warmup():
    proc = subprocess.run([sys.executable, str(TRAIN), "--steps", "10"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--steps (10) must be larger than --warmup (50)" in proc.stderr

