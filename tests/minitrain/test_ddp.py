"""Block A (src/minitrain/ddp.py), graded as notebook 03 and `make grade` grade it: its five functions
without a process group, then in a real 2-process gloo run with torchrun's variables set, on fixtures of the
grader's own (no other TODO). The checker's condition 5 runs this file."""

from minitrain import ddp
from minitrain.lab.grading.graders import grade_block_a


def test_block_a():
    assert grade_block_a(ddp).startswith("Block A: correct.")
