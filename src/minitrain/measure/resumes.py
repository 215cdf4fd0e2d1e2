"""Two runs of train.py compared (final state dicts rank by rank, loss logs step by step), and the
resume done wrong: a copy of a run's snapshot with one item left out, marked complete.
"""

from pathlib import Path

from minitrain.lab.reporting.runs import read_timings
from minitrain.measure.measurement import WORLD_SIZE
from minitrain.snapshot import SNAPSHOTS, load_rank_state, mark_complete, save_rank_state, step_folder
from minitrain.verify import compare_state_files

# done wrong: a resume from the same snapshot with one item left out (what the resumed process then has)
LEFT_OUT = {
    "optimizer": "AdamW's state left out: a fresh AdamW, moments zero, step counts restarting at 1",
    "data": "the data position left out: each rank's stream starts again at its first batch",
}


def leave_out(reference: Path, folder: Path, step: int, item: str) -> None:
    """A copy of the reference run's snapshot at `step` into folder/snapshots with `item` left out,
    marked complete: the resume that follows is what a snapshot without it gives."""
    files = []
    for rank in range(WORLD_SIZE):
        state = load_rank_state(step_folder(reference / SNAPSHOTS, step), rank)
        if item == "optimizer":
            state["optimizer"] = {"state": {}, "param_groups": state["optimizer"]["param_groups"]}
        elif item == "data":
            state["data"] = state["data"] | {"batches": 0}
        files.append(save_rank_state(folder / SNAPSHOTS, step, rank, state))
    mark_complete(folder / SNAPSHOTS, step, files)


def compare_runs(a: Path, b: Path) -> dict:
    """The two runs' final state dicts, rank by rank, and their loss logs, step by step."""
    ranks = []
    for rank in range(WORLD_SIZE):
        c = compare_state_files(a / f"state-rank-{rank}.pt", b / f"state-rank-{rank}.pt")
        ranks.append({"rank": rank, "tensors": len(c.per_tensor), "bitwise_equal": c.bitwise_equal,
                      "max_abs_diff": c.max_abs_diff})
    losses = [[r["loss"] for r in read_timings(run / "timings.jsonl")] for run in (a, b)]
    return {"ranks": ranks, "bitwise_equal": all(r["bitwise_equal"] for r in ranks),
            "max_abs_diff": max(r["max_abs_diff"] for r in ranks),
            "losses_equal": losses[0] == losses[1], "steps": len(losses[1]),
            "final_loss": [losses[0][-1], losses[1][-1]]}
