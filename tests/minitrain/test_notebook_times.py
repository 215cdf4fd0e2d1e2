"""The seconds each notebook took in a lab run: notebook-times.json, notebook 01's table of it, and the
runner, which writes it once the other notebooks have run and executes 01 last (real papermill runs of
small notebooks)."""

import json
from pathlib import Path

import nbformat
import pytest

from minitrain.cli import SettingError
from minitrain.lab.running import make_lab
from minitrain.lab.running.notebook_times import (ENTRY_NOTEBOOK, TIMES_FILE, lab_run, numbered_notebooks, path_of,
                                                  read_times, times_table, write_times)
from minitrain.paths import BUILD_DIR, EXPERIMENT_DIR
from minitrain.provenance import sitting


def test_core_is_the_sheet_s_path_and_the_rest_optional():
    names = numbered_notebooks()
    assert [n for n in names if path_of(n) == "core"] == numbered_notebooks(every=False) == names[:6]
    assert names[0] == ENTRY_NOTEBOOK and names[5] == make_lab.REPORT_NOTEBOOK
    assert all(path_of(n) == "optional" for n in names[6:]) and len(names) > 6


def test_the_table_shows_every_notebook_its_path_its_seconds_and_the_lab_run(tmp_path):
    names = numbered_notebooks()
    write_times(tmp_path, {names[1]: 14.4, names[5]: 5.6, names[2]: None}, lab_run("python -m minitrain.lab", 2))
    lines = times_table(tmp_path).splitlines()
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in lines[1:1 + len(names)]}
    assert list(rows) == names
    assert rows[names[1]] == ["core", "14"] and rows[names[5]] == ["core", "6"] and rows[names[2]] == ["core", "failed"]
    assert rows[ENTRY_NOTEBOOK] == ["core", "runs last, timed when it ends"]
    assert rows[names[3]] == ["core", "not run in this lab run"]
    assert rows[names[6]] == ["optional", "not run in this lab run (`--all-notebooks` runs 07-19)"]
    assert lines[-1].startswith("from notebook-times.json: lab run `python -m minitrain.lab`, started ")
    assert f"sitting {sitting()}: 06 first, then up to 2 notebooks at a time, 01 last" in lines[-1]
    assert list(read_times(tmp_path)["notebooks"]) == sorted([names[1], names[2], names[5]])


def test_a_folder_without_times_says_so_in_one_line_naming_make_lab(tmp_path):
    shown = times_table(tmp_path)
    assert "\n" not in shown and shown.startswith(f"no {TIMES_FILE} in ") and "`make lab` writes it" in shown


@pytest.mark.parametrize("content, named", [("{not json", "is not valid JSON"), ('{"notebooks": {}}', "lacks its")],
                         ids=["not JSON", "no provenance"])
def test_a_broken_times_file_is_named_in_one_line(tmp_path, content, named):
    (tmp_path / TIMES_FILE).write_text(content)
    shown = times_table(tmp_path)
    assert "\n" not in shown and named in shown and "make lab" in shown


def small_notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def test_the_runner_writes_the_times_then_executes_01_last(tmp_path, monkeypatch):
    """display_phase on three small notebooks (01 prints the table, as the real 01 does), each executed
    for real with papermill, the checker beside them: 01's output shows the times the file holds of the
    others, and the file gets 01's own seconds once it ends."""
    notebooks, out = tmp_path / "notebooks", tmp_path / "out"
    notebooks.mkdir(), out.mkdir()
    names = [ENTRY_NOTEBOOK, numbered_notebooks()[1], make_lab.REPORT_NOTEBOOK]
    sources = {ENTRY_NOTEBOOK: "from minitrain.lab.running.notebook_times import times_table\n"
                               "from minitrain.lab.reporting.runs import output_dir\nprint(times_table(output_dir()))",
               names[1]: "print('the sharding notebook')", names[2]: "print('the report notebook')"}
    for name, source in sources.items():
        nbformat.write(small_notebook(source), notebooks / name)
    monkeypatch.setattr(make_lab, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(make_lab, "EXECUTED_DIR", tmp_path / "executed")
    monkeypatch.setenv("MINITRAIN_LAB_OUT", str(out))
    results, failures = make_lab.display_phase(names, run_tests=False, workers=2, repeats=1,
                                             run_record=lab_run("python -m minitrain.lab --test", 2))
    assert failures == [] and [r.name for r in results][-1] == "ddp tests"
    times = json.loads((out / TIMES_FILE).read_text())
    assert sorted(times["notebooks"]) == sorted(names) and all(s > 0 for s in times["notebooks"].values())
    assert times["command"] == "python -m minitrain.lab --test" and times["sitting"] == sitting()
    shown = nbformat.read(tmp_path / "executed" / ENTRY_NOTEBOOK, as_version=4).cells[0].outputs[0]["text"]
    others = {n: s for n, s in times["notebooks"].items() if n != ENTRY_NOTEBOOK}
    write_times(tmp_path, others, {k: v for k, v in times.items() if k != "notebooks"})
    assert shown == times_table(tmp_path) + "\n"  # the others' times of this very lab run; 01 "runs last"


def test_make_lab_writes_the_committed_artifacts_only_when_told(monkeypatch):
    """The reference's `make lab` runs into build/; --commit (make measurements) and the student edition into
    experiments/35-ddp-cpu/, the learner's run as the sheet says."""
    monkeypatch.delenv("MINITRAIN_LAB_OUT", raising=False)
    monkeypatch.setattr(make_lab, "STUDENT_EDITION", False)
    assert make_lab.lab_out(commit=False) == make_lab.REFERENCE_LAB_OUT == BUILD_DIR / "35-ddp-cpu"
    assert make_lab.lab_out(commit=True) == EXPERIMENT_DIR
    monkeypatch.setattr(make_lab, "STUDENT_EDITION", True)
    assert make_lab.lab_out(commit=False) == EXPERIMENT_DIR
    monkeypatch.setenv("MINITRAIN_LAB_OUT", "elsewhere")
    assert make_lab.lab_out(commit=False) == Path("elsewhere")
    with pytest.raises(SettingError, match="unset MINITRAIN_LAB_OUT, or leave out --commit"):
        make_lab.lab_out(commit=True)
