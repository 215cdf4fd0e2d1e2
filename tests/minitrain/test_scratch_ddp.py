"""Notebook 15's grader on real gloo processes: the reference levels match torch's DDP (bit for bit at
2 ranks, within the derived tolerance at 3), the student edition's stubs are "not done", and each
mistake is named. One group per world size grades every class in turn; each worker ends itself after
the collective timeout (hang_report names where it waits), so a hang fails the test instead of stalling it."""

import re
from pathlib import Path

import pytest

import scratch_mistakes
from minitrain.hang_report import MISMATCH
from minitrain.lab.editions import student_edition
from minitrain.lab.grading.graders import ExerciseError
from minitrain.lab.grading.graders.from_scratch import LEVELS, WEIGHT_TOL, scratch_results, verdict
from minitrain.lab.todos.blank import told
from minitrain.paths import REPO
from minitrain.todo import NotDone

HERE = Path(__file__).parent

MISTAKES = {  # label -> (level, class, the words the grader must name it with)
    "no broadcast": ("naive", scratch_mistakes.NoBroadcast, "missing broadcast"),
    "no division": ("naive", scratch_mistakes.NoDivision, "missing division"),
    "waits on the spot": ("overlapped", scratch_mistakes.WaitsOnTheSpot, "a hook that waits on the spot"),
    "forward buckets": ("bucketed", scratch_mistakes.ForwardBuckets, "buckets in forward order"),
    "unflushed": ("bucketed", scratch_mistakes.Unflushed, "a bucket left unflushed"),
    "no buffer broadcast": ("naive", scratch_mistakes.NoBufferBroadcast, "buffers not broadcast"),
    "hooked twice": ("overlapped", scratch_mistakes.HookedTwice, "a tied weight hooked twice"),
    "tied counted twice": ("bucketed", scratch_mistakes.TiedCountedTwice, "a tied weight counted twice"),
    "tied double-added": ("bucketed", scratch_mistakes.TiedDoubleAdded, "a tied weight counted twice"),
    "register_hook": ("overlapped", scratch_mistakes.TensorHook, "OverlappedDDP raised AttributeError"),  # + the hint
    "weights averaged": ("naive", scratch_mistakes.AveragedWeights, "no gradient averaged: after finish()"),
    "cuda.synchronize": ("overlapped", scratch_mistakes.CudaSynchronize, "OverlappedDDP raised"),  # + the CPU hint
    "counters never reset": ("bucketed", scratch_mistakes.CountersNeverReset, "no overlap from step 1 on"),
}
ANOTHER_FORM = {  # right in another form: gloo has ReduceOp.AVG in torch 2.13 (a GPU tutorial's NCCL habit that works)
    "ReduceOp.AVG": ("naive", scratch_mistakes.AverageOp),
}


@pytest.fixture(scope="module")
def blank_file(tmp_path_factory) -> str:
    """The student edition's scratch_ddp.py, in a file the grader's workers load by path."""
    path = tmp_path_factory.mktemp("blank") / "scratch_ddp_blank.py"
    scratch = "src/minitrain/scratch_ddp.py"
    path.write_bytes(student_edition.student_file(REPO / scratch, scratch))
    return str(path)


@pytest.fixture(scope="module")
def two_ranks(blank_file, corpus_dir):
    entries = [(f"reference {level}", level, None) for level in LEVELS]
    entries += [(f"blank {level}", level, blank_file) for level in LEVELS]
    entries += [(label, level, cls) for label, (level, cls, _) in MISTAKES.items()]
    entries += [(label, level, cls) for label, (level, cls) in ANOTHER_FORM.items()]
    return scratch_results(entries, 2, corpus_dir)


def test_reference_levels_are_bit_for_bit_torch_ddp_at_two_ranks(two_ranks):
    for level in LEVELS:
        assert "bit for bit" in verdict(two_ranks, f"reference {level}", 2)


def test_reference_levels_within_the_tolerance_at_three_ranks(corpus_dir):
    results = scratch_results([(level, level, None) for level in LEVELS], 3, corpus_dir)
    for level in LEVELS:
        assert "3 ranks: largest |difference|" in verdict(results, level, 3)
        assert max(r[level]["weight_diff"] for r in results) <= WEIGHT_TOL
        assert 0 <= max(r[level]["grad_bound_share"] for r in results) <= 1  # each element within its bound


@pytest.mark.parametrize("label", list(ANOTHER_FORM))
def test_a_right_answer_in_another_form_passes(two_ranks, label):
    assert "bit for bit" in verdict(two_ranks, label, 2)


@pytest.mark.parametrize("level", list(LEVELS))
def test_the_student_edition_is_not_done(two_ranks, level):
    with pytest.raises(NotDone) as stop:
        verdict(two_ranks, f"blank {level}", 2)
    assert told(stop.value).startswith("not done yet: NaiveDDP"), told(stop.value)


@pytest.mark.parametrize("label", list(MISTAKES))
def test_each_mistake_is_named(two_ranks, label):
    with pytest.raises(ExerciseError) as e:
        verdict(two_ranks, label, 2)
    assert str(e.value).startswith(MISTAKES[label][2]), str(e.value)


def test_a_collective_with_other_shapes_on_another_rank_is_named_with_its_line(corpus_dir):
    """gloo aborts the rank that receives more than it expects: the grader's error leads with that rank's line."""
    number = next(i for i, text in enumerate((HERE / "scratch_mistakes.py").read_text().splitlines(), 1)
                  if "# mismatch:" in text)
    with pytest.raises(ExerciseError) as e:
        verdict(scratch_results([("mismatch", "naive", scratch_mistakes.MismatchedShapes)], 2, corpus_dir), "mismatch", 2)
    assert re.match(rf"all_reduce {re.escape(MISMATCH)} at scratch_mistakes\.py:{number} on rank [01]: the 2-process "
                    "run failed", str(e.value)), str(e.value)

