"""run.json as a RunRecord: every committed run.json reads and writes back byte for byte, and a file
that is not a run record gets one line naming it and the fix."""

import json
from dataclasses import fields

import pytest

from minitrain.paths import EXPERIMENT_DIR
from minitrain.run_record import RunRecord, RunRecordError

COMMITTED = sorted(EXPERIMENT_DIR.rglob("run.json"))


def test_the_experiment_has_committed_runs(committed_run):
    assert len(sorted(committed_run.rglob("run.json"))) >= 4  # the sheet's two runs and at least one repeat of each


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(EXPERIMENT_DIR)))
def test_committed_run_json_round_trips(path, tmp_path):
    record = RunRecord.read(path)
    assert list(json.loads(path.read_text())) == [f.name for f in fields(RunRecord)][:-1]  # no restart
    record.write(tmp_path / "run.json")
    assert (tmp_path / "run.json").read_text() == path.read_text()


def test_a_restart_record_is_written_and_read(tmp_path, committed_run):
    record = RunRecord.read(committed_run / "run.json")
    record.restart = {"attempt": 1, "max_restarts": 1, "snapshot_every": 5, "faults": [[7, 1, 0]]}
    record.write(tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())["restart"] == record.restart
    assert RunRecord.read(tmp_path / "run.json") == record


def edited(tmp_path, run, edit) -> str:
    data = json.loads((run / "run.json").read_text())
    edit(data)
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(RunRecordError) as e:
        RunRecord.read(tmp_path / "run.json")
    return str(e.value)


def test_a_missing_field_is_named(tmp_path, committed_run):
    message = edited(tmp_path, committed_run, lambda d: (d.pop("summary"), d.pop("run_id")))
    assert "lacks run_id, summary" in message and "re-run it into" in message


def test_an_unknown_field_is_named(tmp_path, committed_run):
    assert "has unknown fields speedup" in edited(tmp_path, committed_run, lambda d: d.update(speedup=2.0))


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(RunRecordError, match="run.json is missing; run train.py into"):
        RunRecord.read(tmp_path / "run.json")
    (tmp_path / "run.json").write_text('{"run_id": ')
    with pytest.raises(RunRecordError, match="is not valid JSON"):
        RunRecord.read(tmp_path / "run.json")
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(RunRecordError, match="does not hold a JSON object"):
        RunRecord.read(tmp_path / "run.json")
