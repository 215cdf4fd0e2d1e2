"""Notebook 16's exercise: three broken training scripts in this folder (FOLDER), each to diagnose and to fix. Run one
with `minitrain.diagnose.tools.run(FOLDER / "run_a.py", tool)` on 2 ranks, or with `nproc=1`: how it trains when
no rank can differ from another. A fix goes in FIXED under the script's name (the student edition starts each as a
copy of the broken script)."""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
FIXED = FOLDER / "fixed"
SCRIPTS = ("run_a.py", "run_b.py", "run_c.py")
CAUSES = {  # a diagnosis's "cause" is one of these; the rank its "rank" names for each
    "skipped-backward": "a rank skips a step's backward (so DDP's gradient all-reduce) that the others take, and goes "
                        "on; rank: the one that skips",
    "early-exit": "a rank leaves the training loop, on a decision of its own, before the others; rank: the one that "
                  "leaves",
    "uneven-shard": "the ranks hold different numbers of batches, so one runs a step the others do not; rank: the one "
                    "with more",
    "skipped-collective": "a rank skips a collective other than DDP's that the others call; rank: the one that skips",
    "barrier-on-one-rank": "a barrier only one rank reaches; rank: that one",
    "mismatched-shapes": "every rank calls the same collective, with tensors of different shapes; rank: None",
    "straggler": "one rank is slower at every step and nothing fails; rank: the slow one",
}
