"""train.py, unchanged, plus a note from every rank of the CPU cores and threads it really had.

    taskset -c 0 python -m minitrain.launch --nproc-per-node=2 \
        experiments/35-ddp-cpu/beyond/affinity_train.py --out /tmp/pinned

Takes train.py's options. After training, rank R writes rank-R.json into --out: its pid, its CPU
affinity (the cores the OS lets it run on; `taskset` on the launcher is inherited by every
worker), torch's thread count and OMP_NUM_THREADS. minitrain.scaling_matrix reads these files.
"""

import json
import os
import runpy
from pathlib import Path

import torch

TRAIN_SCRIPT = Path(__file__).resolve().parents[1] / "train.py"


def rank_facts() -> dict:
    """What this process ran on, as the operating system and torch see it."""
    return {"rank": int(os.environ["RANK"]),
            "pid": os.getpid(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


if __name__ == "__main__":
    train = runpy.run_path(str(TRAIN_SCRIPT))  # train.py's functions; its own main does not run
    args = train["parse_args"]()
    train["main"]()
    facts = rank_facts()  # after training: the affinity the rank kept for the whole run
    (args.out / f"rank-{facts['rank']}.json").write_text(json.dumps(facts) + "\n")
