"""Two full runs with the same seeds give bitwise-identical weights and identical losses."""

import json

from conftest import TRAIN, launch
from minitrain.verify import compare_state_files


def test_two_runs_are_bitwise_identical(tmp_path, corpus_dir):
    for name in ("a", "b"):
        proc = launch("--nproc-per-node=2", str(TRAIN), "--out", str(tmp_path / name), "--steps", "8",
                      "--warmup", "2", "--corpus-dir", str(corpus_dir))
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    for rank in (0, 1):
        same = compare_state_files(tmp_path / "a" / f"state-rank-{rank}.pt", tmp_path / "b" / f"state-rank-{rank}.pt")
        assert same.bitwise_equal, same.table()
    losses = [[json.loads(line)["loss"] for line in (tmp_path / n / "timings.jsonl").read_text().splitlines()]
              for n in ("a", "b")]
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    assert losses[0][0] != losses[0][-1]  # the runs trained
