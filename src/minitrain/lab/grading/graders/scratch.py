"""ex15: notebook 15's NaiveDDP, OverlappedDDP and BucketedDDP in the graded tree's src/minitrain/scratch_ddp.py."""

from pathlib import Path

from minitrain.lab.todos.registry import Todo


def grade_ex15(repo: Path, todo: Todo) -> str:
    """grade_scratch_ddp: its workers import the graded tree's minitrain.scratch_ddp (PYTHONPATH)."""
    from minitrain.lab.grading.scratch_graders import grade_scratch_ddp
    return grade_scratch_ddp()
