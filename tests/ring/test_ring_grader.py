"""Notebook 17's ring grader (ex17) on real gloo groups of 2, 3 and 4 processes: the reference passes, a right ring in
another form passes, a blank stops before any process, and each wrong ring is named."""

from pathlib import Path

import pytest

from minitrain.lab.grading.graders import ring as ring_grader
from minitrain.lab.grading.graders.ring import grade_ring
from minitrain.lab.grading.graders.running import ExerciseError
from minitrain.paths import REPO
from minitrain.todo import NotDone

REFERENCE = (REPO / "src/minitrain/ring.py").read_text()
EXCHANGE = """        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, parts[send], (rank + 1) % n),
                                            dist.P2POp(dist.irecv, incoming, (rank - 1) % n)]):
            work.wait()"""
WRONG = {
    # the sheet's habit of blocking calls: both ranks send first and wait for a receive nobody has posted
    "blocking-sends": (EXCHANGE, "        dist.send(parts[send], (rank + 1) % n)\n        dist.recv(incoming, (rank - 1) % n)",
                       r"^the 2-rank run hangs at ring\.py:\d+ on rank \d \(waits in send\): a send that waits for its receive"),
    # the send started and waited for before the receive is posted: the same wait, inside Work.wait()
    "isend-then-wait": (EXCHANGE, "        dist.isend(parts[send], (rank + 1) % n).wait()\n"
                        "        dist.irecv(incoming, (rank - 1) % n).wait()",
                        r"^the 2-rank run waits \d+ s at ring\.py:\d+ for its send to complete: "),
    # the hurried learner: what arrives replaces the chunk instead of adding to it
    "copy-not-add": ("        parts[receive] += incoming", "        parts[receive] = incoming",
                     r"rank 0 returned chunk 0 with the shares of ranks \[1\] only"),
    # the built-in collective, which the exercise is to write
    "built-in": ("    n = dist.get_world_size()\n    flat = tensor", "    dist.all_reduce(tensor)\n    return\n"
                 "    n = dist.get_world_size()\n    flat = tensor", r"^ring_all_reduce called dist\.all_reduce: "),
    # a GPU tutorial's all-reduce that returns the result instead of summing in place
    "returns-the-sum": ("    tensor.detach().copy_(summed[:flat.numel()].view_as(tensor))",
                        "    return summed[:flat.numel()].view_as(tensor)", r"^ring_all_reduce returned a Tensor: "),
    # the average DDP needs, computed here: the sum is asked
    "average": ("    tensor.detach().copy_(summed[:flat.numel()].view_as(tensor))",
                "    tensor.detach().copy_(summed[:flat.numel()].view_as(tensor) / n)", r"^ring_all_reduce on 2 ranks: the average"),
    # chunks cut by numel // n: the remainder is never sent
    "remainder-dropped": ("    parts = [part.clone() for part in chunks(tensor.detach().reshape(-1), n)]",
                          "    size = tensor.numel() // n\n    parts = [tensor.detach().reshape(-1)[i * size:(i + 1) * size].clone() "
                          "for i in range(n)]", r"^ring_reduce_scatter of 1 elements on 2 ranks: rank 0 returned 0 elements; chunk 0 as chunks\(\) cuts"),
    # the all-gather's steps forward the wrong chunk: order scrambled beyond 2 ranks
    "gather-own-chunk-always": ("        send, receive = (rank - step) % n, (rank - step - 1) % n",
                                "        send, receive = rank, (rank - step - 1) % n", r"^ring_all_gather on 3 ranks: "),
}


PARITY = """        if rank % 2 == 0:  # even ranks send first, odd ranks receive first: no two sends face each other
            dist.send(parts[send], (rank + 1) % n)
            dist.recv(incoming, (rank - 1) % n)
        else:
            dist.recv(incoming, (rank - 1) % n)
            dist.send(parts[send], (rank + 1) % n)"""


def ring_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ring.py"
    path.write_text(text)
    return path


def test_the_reference_ring_passes(tmp_path):
    assert grade_ring(ring_file(tmp_path, REFERENCE)).startswith("ex17: correct.")


def test_a_ring_in_another_form_passes(tmp_path):
    """isend then irecv, waited one by one, instead of batch_isend_irecv."""
    other = REFERENCE.replace(EXCHANGE, "        sent = dist.isend(parts[send], (rank + 1) % n)\n"
                                        "        dist.irecv(incoming, (rank - 1) % n).wait()\n        sent.wait()")
    assert other != REFERENCE
    assert grade_ring(ring_file(tmp_path, other)).startswith("ex17: correct.")


def test_blocking_calls_ordered_by_rank_parity_pass(tmp_path):
    """A right answer in another form: at 3 ranks the odd-sized ring still has a rank that receives first."""
    other = REFERENCE.replace(EXCHANGE, PARITY)
    assert grade_ring(ring_file(tmp_path, other)).startswith("ex17: correct.")


def test_a_blank_ring_stops_before_any_process(tmp_path, monkeypatch):
    blank = REFERENCE.replace("    ### BEGIN SOLUTION\n    rank, n = dist.get_rank(), dist.get_world_size()\n    parts = "
                              "[part.clone()", "    raise NotDone('ring_reduce_scatter')\n    ### BEGIN SOLUTION\n    rank, n "
                              "= dist.get_rank(), dist.get_world_size()\n    parts = [part.clone()", 1)
    blank = "from minitrain.todo import NotDone\n" + blank

    def no_process(*args, **kwargs):
        raise AssertionError("the blank stub started ranks")
    monkeypatch.setattr(ring_grader, "spawn_workers", no_process)
    with pytest.raises(NotDone, match="ring_reduce_scatter"):
        grade_ring(ring_file(tmp_path, blank))


@pytest.mark.parametrize("name", WRONG)
def test_each_wrong_ring_is_named(tmp_path, monkeypatch, name):
    monkeypatch.setenv("MINITRAIN_COLLECTIVE_TIMEOUT", "3")
    old, new, named = WRONG[name]
    assert REFERENCE.count(old) == 1
    with pytest.raises(ExerciseError, match=named):
        grade_ring(ring_file(tmp_path, REFERENCE.replace(old, new)))
