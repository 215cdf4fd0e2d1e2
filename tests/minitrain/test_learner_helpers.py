"""The notebooks' helpers for the learner: their own code shown from disk, and predictions recorded
then shown beside the measurement."""

import pytest

from minitrain.lab.notebooks import predictions
from minitrain.lab.notebooks import yourcode
from minitrain.lab.notebooks.yourcode import TodoNotDone, your_code, your_todo


def test_your_code_reads_the_file_as_it_is_now(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("import os\n\n\ndef f():\n    ### BEGIN SOLUTION: f\n    return 1\n    ### END SOLUTION\n\n\nx = 2\n")
    shown = your_code(path, "f")
    assert shown.splitlines()[0].endswith("lines 4-7")
    assert shown.splitlines()[-1] == "    ### END SOLUTION" and "x = 2" not in shown
    path.write_text(path.read_text().replace("return 1", "return 41 + 1"))  # the learner edits it
    assert "return 41 + 1" in your_code(path, "f")
    with pytest.raises(LookupError, match="no top-level g"):
        your_code(path, "g")


def test_the_sheets_functions_are_found_where_the_notebooks_show_them():
    for path, names in [("src/minitrain/ddp.py", ("init_distributed", "wrap_for_ddp", "is_main_process",
                                                  "barrier", "cleanup")),
                        ("experiments/35-ddp-cpu/train.py", ("train",))]:
        shown = your_code(path, *names)
        assert shown.count(f"# {path}, lines ") == len(names)


def test_a_blank_todo_stops_the_cell_that_shows_it_in_one_line(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text('def f():\n    return 1\n\n\ndef g():\n    """doc"""\n    # YOUR CODE HERE (Block X: g)\n'
                    '    raise NotDone("Block X: g")\n')
    your_todo(path, "f")  # written: shown, no stop
    with pytest.raises(TodoNotDone) as stop:
        your_todo(path, "f", "g")
    assert "def g():" in capsys.readouterr().out  # shown before it stops
    assert stop.value._render_traceback_() == [  # what Jupyter shows: one line, no traceback
        "TodoNotDone: Block X: g is blank: write it in " + str(path) + " at line 8 (shown above), save the file, "
        "then run this cell again"]


def test_a_training_run_is_refused_while_a_todo_it_needs_is_blank(tmp_path, monkeypatch):
    for name in yourcode.TRAINING_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    monkeypatch.setattr(yourcode, "REPO", tmp_path)
    yourcode.ready_to_train()
    (tmp_path / "src/minitrain/timing.py").write_text('    raise NotDone("Block D: t")\n')
    with pytest.raises(TodoNotDone, match=r"^Block D: t is blank: .* at line 1 \(notebook 04 asks for it\)"):
        yourcode.ready_to_train()


def test_a_run_that_calls_an_earlier_notebooks_todo_is_refused_while_it_is_blank(tmp_path, monkeypatch):
    """Notebook 17's measurement joins its group with Block A's init_distributed: a blank one stops the cell first."""
    ddp = tmp_path / "src/minitrain/ddp.py"
    ddp.parent.mkdir(parents=True)
    ddp.write_text('def init_distributed():\n    return 0, 1\n\n\ndef cleanup():\n    raise NotDone("Block A: cleanup")\n')
    monkeypatch.setattr(yourcode, "REPO", tmp_path)
    yourcode.ready_to_run("src/minitrain/ddp.py", "init_distributed")  # written; another function's blank is not asked
    ddp.write_text(ddp.read_text().replace("return 0, 1", 'raise NotDone("Block A: init_distributed")'))
    with pytest.raises(TodoNotDone, match=r"^Block A: init_distributed is blank: .* at line 2 \(notebook 03 asks for it\)"):
        yourcode.ready_to_run("src/minitrain/ddp.py", "init_distributed")


def test_a_prediction_is_shown_beside_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITRAIN_LAB_SCRATCH", str(tmp_path))
    assert "no prediction" in predictions.reveal("wrap", "equal")
    assert "no prediction for 'wrap' yet" in predictions.predict("wrap", "  ")
    assert predictions.predict("wrap", "rank 1 keeps its own") == "your prediction for 'wrap': 'rank 1 keeps its own'"
    assert predictions.reveal("wrap", "rank 0's weights") == \
        "wrap: you predicted: 'rank 1 keeps its own'\nmeasured: rank 0's weights"
    with pytest.raises(TypeError, match="in quotes"):
        predictions.predict("wrap", 3)


def test_make_lab_names_a_blank_todo_in_one_line():
    from minitrain.lab.running.make_lab import not_done
    log = ('  File "experiments/35-ddp-cpu/train.py", line 68, in train\n'
           '    raise NotDone("Block C: the setup")\n'
           'minitrain.todo.NotDone: not done yet: Block C: the setup\nerror: the run failed, rank 0 exited with status 1\n')
    assert not_done(log) == ("not done yet: Block C: the setup (experiments/35-ddp-cpu/train.py:68): "
                             "write it, then run make lab again")
    assert not_done("error: the run failed") is None
    stopped = ("---> 1 your_todo(...)\nTodoNotDone: Block B: make_shard's split is blank: write it in src/minitrain/data.py at "
               "line 129 (shown above), save the file, then run this cell again\n")  # papermill's report of a notebook's stop
    assert not_done(stopped) == ("Block B: make_shard's split is blank: write it in src/minitrain/data.py at line 129, "
                                 "then run make lab again")


def test_make_lab_names_a_blank_block_g_on_its_failed_line(tmp_path, monkeypatch, committed_run, capsys):
    """Notebook 06 as the student edition hands it out (Block G blank, everything else written), executed as make
    lab executes it, against a copy of the committed run: the FAILED line itself names Block G and the notebook."""
    import shutil

    import nbformat

    from minitrain.lab.editions.student_edition import student_notebook
    from minitrain.lab.running import make_lab
    from minitrain.lab.running.notebook_times import LAST_ON_THE_PATH
    from minitrain.paths import NOTEBOOKS_DIR

    out = tmp_path / "run"
    shutil.copytree(committed_run, out, ignore=shutil.ignore_patterns("beyond", "diagnose"))
    monkeypatch.setenv("MINITRAIN_LAB_OUT", str(out))
    src = tmp_path / LAST_ON_THE_PATH
    nbformat.write(student_notebook(nbformat.read(NOTEBOOKS_DIR / LAST_ON_THE_PATH, as_version=4)), src)
    with pytest.raises(make_lab.NotebookFailed) as failure:
        make_lab.Execution(src, tmp_path / "executed.ipynb", {"live_run": False}).wait()
    assert make_lab.failed(*make_lab.notebooks_failed([str(failure.value)]), out) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (f"FAILED: not done yet: Block G: your paragraph (notebooks/{LAST_ON_THE_PATH}): write it, "
                        "then run make lab again"), lines
    assert lines[-1] == f"next: {make_lab.WRITE_FIRST}"
