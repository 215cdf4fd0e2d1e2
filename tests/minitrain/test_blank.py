"""The protocol for blank and wrong (minitrain.lab.todos.blank): a blank is the core's NotDone, read from the exception
or from another process's output by its class, never by its message; a wrong answer's ExerciseError is never blank."""

import subprocess
import sys

from minitrain.lab.grading.graders import ExerciseError
from minitrain.lab.todos import blank
from minitrain.todo import NotDone


def test_a_child_process_that_raised_notdone_is_read_as_blank():
    code = "from minitrain.todo import NotDone\ndef f():\n    raise NotDone(\"Block B: make_shard's split\")\nf()\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "minitrain.todo.NotDone: " in proc.stderr, proc.stderr
    assert blank.in_output(proc.stderr) == "Block B: make_shard's split"
    assert blank.raised_in(proc.stderr.splitlines()[-1]) == "Block B: make_shard's split"
    assert blank.said(blank.in_output(proc.stderr)) == "not done yet: Block B: make_shard's split"


def test_a_wrong_answer_is_not_blank():
    wrong = ExerciseError("contiguous split: make_shard(0, 2) gave rank 0 sentences 0..4")
    assert blank.what(wrong) is None and blank.what(NotImplementedError("mine")) is None
    assert blank.in_output(f"Traceback ...\n{type(wrong).__module__}.ExerciseError: {wrong}\n") is None
    assert blank.what(NotDone("Block A: barrier")) == "Block A: barrier"


def test_an_earlier_edition_s_stub_in_a_submission_is_still_blank():
    earlier = NotImplementedError("not done yet: Block B: the counts check")  # the stub before minitrain.todo
    assert blank.what(earlier) == "Block B: the counts check" and blank.told(earlier) == str(earlier)
    assert blank.told(NotImplementedError("mine")) == "mine"


def test_the_marks_the_protocol_writes_are_read_back():
    what = 'Block X: f\'s "body"'
    assert blank.stub_in("    " + blank.stub(what)) == what
    assert blank.in_output(f"SKIPPED [1] tests/x.py:3: {blank.skipped(what)}") == what
    stop = blank.TodoNotDone(what, "src/x.py at line 3 (shown above)")
    assert isinstance(stop, NotDone) and blank.what(stop) == what
    [line] = stop._render_traceback_()
    assert blank.in_output(line) == what
    assert blank.stop_in(line) == f"{what} is blank: write it in src/x.py at line 3 (shown above)"
    assert blank.raised_in(f"NotDone: {NotDone(what)}") == what  # IPython names the class without its module
