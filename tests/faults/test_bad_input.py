"""Bad corpus files, end to end: train.py under the lab's launcher ends the run with a message naming
the problem and the fix. Each corpus error's message is checked in-process where it is raised
(test_data.py, test_tokenizer.py); these two runs show that train.py passes it on, whether every rank
fails on its input or one rank alone."""

import shutil

from harness import TRAIN, launch


def run_train(*args: str, nproc: int = 2) -> tuple[int, str]:
    proc = launch(f"--nproc-per-node={nproc}", str(TRAIN), *args)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def test_missing_corpus(tmp_path):
    status, out = run_train("--corpus-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert status != 0
    assert f"{tmp_path / 'nowhere'}" in out and "does not exist" in out, out
    assert "python -m minitrain.corpus --out" in out
    assert not (tmp_path / "out" / "timings.jsonl").exists()


def test_more_processes_than_sentences(tmp_path, corpus_dir):
    """Rank 1's shard is empty, rank 0's is not: rank 1's error ends the run."""
    folder = tmp_path / "corpus"
    shutil.copytree(corpus_dir, folder)
    (folder / "train.jsonl").write_text('{"text": "The dog sleeps ."}\n')
    status, out = run_train("--corpus-dir", str(folder), "--out", str(tmp_path / "out"), "--steps", "3",
                            "--warmup", "1")
    assert status != 0
    assert "rank 1 gets an empty shard" in out and "use at most 1 processes" in out, out
    assert not (tmp_path / "out" / "timings.jsonl").exists()
