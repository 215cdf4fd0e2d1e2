"""A deeper measurement's NAME.json: its own results (the measurement's dicts) inside one envelope
(measurement, findings, provenance) typed here; read_results_file is its one reader, write_results_file its one writer."""

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from minitrain.artifacts import field_problems, read_json_object, write_json
from minitrain.paths import relative


class ResultsFileError(ValueError):
    """A results file cannot be read; the message names the file, what is wrong and the fix."""


@dataclass(frozen=True)
class Finding:
    """One headline number of a measurement: what, how much, in what unit, and what it means."""
    name: str
    value: float | int | list | None
    unit: str
    meaning: str


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where, when and under what load a result was measured, and the command that repeats it (in NAME.json's order)."""
    torch: str
    python: str
    platform: str
    cpu_model: str
    cores: int
    sitting: str | None = None  # None: written before provenance named its sitting
    load_average_1min: float
    date: str
    corpus_sha256: str | None = None  # None: the measurement trains on no corpus
    run_id: str | None = None  # None: written before run ids
    command: str
    runtime_s: float

    def as_dict(self) -> dict:
        """As NAME.json holds it: the fields that are set."""
        return {k: v for k, v in asdict(self).items() if v is not None}


OPTIONAL = tuple(f.name for f in fields(Provenance) if f.default is None)


def holds_results(data: object) -> bool:
    """Whether a JSON value is a measurement's results (it names its measurement and has findings)."""
    return isinstance(data, dict) and "measurement" in data and "findings" in data


def typed_results(data: dict, shown: str, measurement: str | None = None) -> dict:
    """`data` (a NAME.json's object) with its findings as Finding and its provenance as Provenance,
    or ResultsFileError naming `shown`, the first problem, and the fix."""
    name, findings, prov = data.get("measurement"), data.get("findings"), data.get("provenance")
    keys = {f.name for f in fields(Finding)}
    problem = ("it names no measurement" if not isinstance(name, str) else
               f"it holds measurement {name!r}, not {measurement!r}" if measurement not in (None, name) else
               "its findings are not a list" if not isinstance(findings, list) else
               "a finding is not a record of name, value, unit and meaning" if any(
                   not isinstance(r, dict) or r.keys() != keys for r in findings) else
               "its provenance is not an object" if not isinstance(prov, dict) else
               f"its provenance {found}" if (found := field_problems(Provenance, prov, OPTIONAL)) else "")
    if problem:
        raise ResultsFileError(f"{shown}: {problem}; {_fix(measurement or name)}")
    return data | {"findings": [Finding(**r) for r in findings], "provenance": Provenance(**prov)}


def _fix(measurement: object) -> str:
    return f"re-run python -m minitrain.measure.{measurement or 'NAME'}, or restore the committed file from git"


def read_results_file(path: Path, measurement: str | None = None) -> dict:
    """The results in `path`, typed (typed_results); `measurement`: the name it must hold."""
    fix, shown = _fix(measurement or Path(path).stem), relative(path)
    return typed_results(read_json_object(path, ResultsFileError, shown, fix, fix), shown, measurement)


def plain(results: dict) -> dict:
    """`results` as NAME.json holds them: findings and provenance as JSON objects."""
    return results | {"findings": [asdict(f) for f in results["findings"]],
                      "provenance": results["provenance"].as_dict()}


def write_results_file(path: Path, results: dict) -> None:
    """Write `results` (findings as Finding, provenance as Provenance) to `path` as JSON, atomically."""
    write_json(path, plain(results))
