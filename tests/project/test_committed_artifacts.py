"""What a learner reads comes from the committed run: the committed notebooks name only committed
run ids, show no temporary or machine path and no FAIL row, and the manifest agrees with the runs."""

import datetime
import json
import re
from pathlib import Path

import nbformat
import pytest

from minitrain.lab.reporting.disturbance import disturbance
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.results_file import read_results_file
from minitrain.lab.reporting.runs import REPEATS_DIR, SINGLE_DIR, read_run
from minitrain.lab.reporting.sittings import BEFORE_SITTINGS, committed_sittings
from minitrain.lab.running.whole_experiment import REPEATS
from minitrain.lab.running.notebook_times import (ENTRY_NOTEBOOK, TIMES_FILE, numbered_notebooks, read_times, times_table,
                                                  write_times)
from minitrain.paths import BEYOND_DIR, EXPERIMENT_DIR, NOTEBOOKS_DIR, REPO

RUN_ID = re.compile(r"run id:? ([0-9a-f]{8})\b")
FAIL_ROW = re.compile(r"^\S.*\s{2}FAIL\s{2}", re.MULTILINE)
MACHINE_PATHS = re.compile(r"/tmp/|minitrain-nbval-|/private/var/|/home/\w+|/Users/\w+|/root/|" + re.escape(str(REPO)))
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb")) + sorted(EXPERIMENT_DIR.rglob("*.ipynb"))


def committed_run_ids() -> set[str]:
    folders = [EXPERIMENT_DIR, EXPERIMENT_DIR / SINGLE_DIR, *(EXPERIMENT_DIR / REPEATS_DIR).glob("r*")]
    return {read_run(folder)[0].run_id for folder in folders}


def committed_measurement_ids() -> set[str]:
    """The run ids of the deeper measurements in beyond/ (results written before run ids have none)."""
    found = [read_results_file(p)["provenance"] for p in BEYOND_DIR.glob("*.json")]
    return {p.run_id for p in found if p.run_id}


def output_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts += [v for k, v in out.get("data", {}).items() if k.startswith("text/") and isinstance(v, str)]
    return "\n".join(texts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_shows_the_committed_run(path):
    text = output_text(path)
    stray = set(RUN_ID.findall(text)) - committed_run_ids() - committed_measurement_ids()
    assert not stray, f"{path.name} shows runs that are not committed: {sorted(stray)}; re-run make lab " \
                      "on a quiet machine and commit notebooks/ with experiments/"
    stored = MACHINE_PATHS.findall(path.read_text())  # outputs, sources and metadata alike
    assert not stored, f"{path.name} holds machine paths: {stored[:3]}"
    assert not FAIL_ROW.findall(text), f"{path.name} shows a FAIL row: {FAIL_ROW.findall(text)[:1]}"


def test_the_manifest_names_the_committed_runs():
    manifest = json.loads((EXPERIMENT_DIR / "manifest.json").read_text())
    assert manifest["run_ids"] == {"1proc": read_run(EXPERIMENT_DIR / SINGLE_DIR)[0].run_id,
                                   "2proc": read_run(EXPERIMENT_DIR)[0].run_id}
    repeats = {r["run_id"] for n in ("1proc", "2proc") for r in manifest["repeats"][n]}
    assert repeats == committed_run_ids() - set(manifest["run_ids"].values())
    assert manifest["repeats"]["count"] >= REPEATS


def test_the_committed_run_is_not_disturbed():
    """Its repeats agree (minitrain.lab.reporting.disturbance), and the manifest records it."""
    manifest = Manifest.read(EXPERIMENT_DIR / "manifest.json")
    tps = [[r["tokens_per_sec"] for r in manifest.repeats[f"{n}proc"]] for n in (1, 2)]
    threads = manifest.threads_per_rank
    assert manifest.disturbed == [] == disturbance(*tps, threads["1proc"], threads["2proc"]), \
        "the committed repeats look disturbed: re-make them on a quiet machine (make measurements)"


def test_committed_commands_hold_no_machine_path():
    for path in [EXPERIMENT_DIR / "manifest.json", *EXPERIMENT_DIR.rglob("run.json"), *EXPERIMENT_DIR.glob("beyond/*.json")]:
        found = MACHINE_PATHS.findall(path.read_text())
        assert not found, f"{path.relative_to(REPO)} holds machine paths: {found[:3]}"


SITTING = re.compile(r"sitting (boot \w+ of [^,\n]+|date [\d-]+ of [^,\n]+)")


def test_committed_results_come_from_one_sitting_docs_provenance_names():
    """Every committed result: one boot of one machine, within a day; docs/provenance.md says which."""
    found = committed_sittings()
    sittings = {sitting for sitting, _ in found.values()}
    assert len(sittings) == 1 and BEFORE_SITTINGS not in sittings, (
        "the committed results come from several sittings; re-make them with python -m minitrain.measure.sitting:\n"
        + "\n".join(f"{path}: {s}" for path, (s, _) in found.items()))
    dates = sorted(datetime.datetime.fromisoformat(date) for _, date in found.values())
    assert dates[-1] - dates[0] < datetime.timedelta(days=1), f"one sitting over more than a day: {dates[0]} to {dates[-1]}"
    assert sittings.pop() in " ".join((REPO / "docs" / "provenance.md").read_text().split()), \
        "docs/provenance.md does not name the committed results' sitting"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_showing_two_sittings_says_so(path):
    """A notebook whose outputs name more than one sitting says so in generated text (lab.sittings)."""
    shown = set(SITTING.findall(output_text(path)))
    assert len(shown) <= 1 or "sittings (" in output_text(path), (
        f"{path.name} shows results of {len(shown)} sittings ({shown}) without saying so: call "
        f"minitrain.lab.reporting.sittings.sitting_note on the results it compares")


def test_notebook_01_shows_the_times_of_the_lab_run_that_made_the_notebooks(tmp_path):
    """`python -m minitrain.lab --all-notebooks` wrote notebook-times.json, then executed 01 last: 01's committed
    table is the file's, but for 01's own seconds, added once it ended."""
    times = read_times(EXPERIMENT_DIR)
    assert sorted(times["notebooks"]) == numbered_notebooks() and None not in times["notebooks"].values(), \
        f"{TIMES_FILE} is not of a lab run that executed every notebook: run python -m minitrain.lab --all-notebooks"
    others = {n: s for n, s in times["notebooks"].items() if n != ENTRY_NOTEBOOK}
    write_times(tmp_path, others, {k: v for k, v in times.items() if k != "notebooks"})
    nb = nbformat.read(NOTEBOOKS_DIR / ENTRY_NOTEBOOK, as_version=4)
    [cell] = [c for c in nb.cells if c.cell_type == "code" and "times_table(" in c.source]
    assert [o.get("text") for o in cell.outputs] == [times_table(tmp_path) + "\n"], \
        f"{ENTRY_NOTEBOOK} does not show the times in {TIMES_FILE}: re-run python -m minitrain.lab --all-notebooks"
