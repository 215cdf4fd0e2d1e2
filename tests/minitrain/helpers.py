"""Checks shared by the measurement tests: the findings records and the provenance every measurement JSON holds
(importable: tests/minitrain is on sys.path, as for ddp_workers)."""

import json
from pathlib import Path

import pytest

from minitrain.lab.reporting.results_file import Finding, Provenance

PROVENANCE = {"torch": "2.13.0", "python": "3.11.7", "platform": "Linux-6.1-x86_64", "cpu_model": "a CPU", "cores": 2,
              "load_average_1min": 0.5, "date": "2026-11-30T08:45:36+00:00", "command": "python -m minitrain.measure.x",
              "runtime_s": 1.0}  # a results file's provenance, made up


EXPERIMENT_STEPS, EXPERIMENT_WARMUP, EXPERIMENT_REPEATS = 12, 4, 2  # the session's experiment (conftest.py)


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def check_findings(records: list[Finding], expected: dict[str, object]) -> dict[str, Finding]:
    """The findings records are exactly `expected`'s names, in order, with those values (floats
    approximately, lists element-wise), each with a unit and a meaning; return them by name."""
    assert [r.name for r in records] == list(expected)
    for record in records:
        assert isinstance(record, Finding), record
        want = expected[record.name]
        assert record.value == (pytest.approx(want) if want is not None else None), record.name
        assert isinstance(record.unit, str) and record.unit.strip(), record
        assert isinstance(record.meaning, str) and len(record.meaning) > 10, record
    return {r.name: r for r in records}


def check_provenance(results: dict, module: str, *keys: str) -> Provenance:
    """A measurement JSON's provenance: the machine, `keys`, and the command that repeats it."""
    prov = results["provenance"]
    assert isinstance(prov, Provenance) and all(getattr(prov, key) is not None for key in keys), keys
    assert prov.command.startswith(f"python -m {module} --out ")
    return prov
