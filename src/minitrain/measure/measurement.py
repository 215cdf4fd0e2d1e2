"""The one shape of a deeper measurement: a name, a run into a folder (with a quick mode), a
results file NAME.json holding its provenance and its findings as short records, and figures.

Each measurement module defines `MEASUREMENT = Measurement(...)`; `minitrain.measure.registry()`
finds them. The lab's report reads the findings from the JSON files, never from this code.
"""

import argparse
import contextlib
import json
import os
import secrets
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from minitrain.artifacts import write_json
from minitrain.cli import LabArgumentParser, output_folder
from minitrain.paths import BEYOND_DIR, BUILD_DIR, DEFAULT_CORPUS_DIR, relative
from minitrain.provenance import machine_provenance, provenance


@dataclass(frozen=True)
class Measurement:
    name: str  # writes NAME.json; `python -m minitrain.measure.NAME` runs it
    title: str
    notebook: str  # the notebook that shows it, in notebooks/
    run: Callable[..., dict]  # run(out, quick=False, **options) -> the results it wrote
    figures: tuple[str, ...]

    @property
    def result_file(self) -> str:
        return f"{self.name}.json"

    def load(self, path: str | Path = "") -> dict:
        """Results of a run: `path` is NAME.json or the folder holding it; empty: the committed ones."""
        path = Path(path) if path else BEYOND_DIR
        return json.loads((path / self.result_file if path.is_dir() else path).read_text())


def finding(name: str, value: float | int | None, unit: str, meaning: str) -> dict:
    """One headline number of a measurement: what, how much, in what unit, and what it means."""
    return {"name": name, "value": value, "unit": unit, "meaning": meaning}


def command_line(module: str, out: Path, quick: bool, **options: object) -> str:
    """The command that repeats a measurement, as a reader types it (paths relative to the repository;
    the default corpus left out)."""
    words = ["python", "-m", module, "--out", relative(out)] + (["--quick"] if quick else [])
    for key, value in options.items():
        if key == "corpus_dir" and value is not None and Path(value).resolve() == DEFAULT_CORPUS_DIR.resolve():
            continue  # the default: left out, as a reader would
        if value is not None:
            words += [f"--{key.replace('_', '-')}", relative(value) if isinstance(value, Path) else str(value)]
    return shlex.join(words)


def write_results(out: Path, measurement: Measurement, results: dict, findings: list[dict],
                  command: str, started: float, corpus_dir: Path | None = None) -> dict:
    """Add `provenance` (machine, corpus, command, run time) and `findings` to `results`; write NAME.json."""
    machine = machine_provenance() if corpus_dir is None else provenance(corpus_dir)
    results = results | {
        "measurement": measurement.name,
        "findings": findings,
        "provenance": machine | {"run_id": secrets.token_hex(4),  # names this run wherever it is shown
                                 "command": command, "runtime_s": round(time.perf_counter() - started, 1)},
    }
    write_json(Path(out) / measurement.result_file, results)
    return results


def provenance_line(results: dict, what: str = "") -> str:
    """Where, when and under what load a result was measured, and the command that repeats it."""
    p = results["provenance"]
    run_id = f"run id {p['run_id']}, " if "run_id" in p else ""  # results written before run ids: none
    return ((f"{what}\n" if what else "") + f"{run_id}measured {p['date']} on {p['cores']} cores of {p['cpu_model']}, "
            f"torch {p['torch']}, load average {p['load_average_1min']:.1f} at the end, {p['runtime_s']:.0f} s\n"
            f"command: {p['command']}")


def parser(measurement: Measurement, quick_help: str, corpus: bool = True, workers: bool = False) -> LabArgumentParser:
    """The options every measurement takes: --out and --quick; --corpus-dir for those that train;
    with `workers`, the hidden --worker/--work of a module that starts itself again under torchrun."""
    p = LabArgumentParser(prog=f"python -m minitrain.measure.{measurement.name}", description=measurement.title)
    p.add_argument("--out", type=output_folder, default=BEYOND_DIR,
                   help=f"output folder (default: {relative(BEYOND_DIR)})")
    p.add_argument("--quick", action="store_true", help=quick_help)
    if corpus:
        p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    if workers:
        p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one rank, under torchrun
        p.add_argument("--work", type=Path, help=argparse.SUPPRESS)  # where the ranks leave their notes
    return p


def runs_folder(out: Path, name: str) -> Path:
    """Where a measurement keeps its runs: build/NAME for the committed results (git-ignored),
    else beside `out` (a test's temporary folder), so that two measurements never share one."""
    out = Path(out).resolve()
    return BUILD_DIR / name if out == BEYOND_DIR.resolve() else out / f"{name}-runs"


@contextlib.contextmanager
def fresh_folder(path: Path) -> Iterator[Path]:
    """A folder for a measurement's runs, left in place afterwards for a look, so the commands its
    results record name a real folder. Emptied first only inside build/ (git-ignored, ours)."""
    path = Path(path).resolve()
    if path.is_relative_to(BUILD_DIR.resolve()):
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    yield path


def progress(total: int, unit: str):
    """A progress bar with the time left (tqdm: a terminal bar, or a widget in a notebook), silent
    under pytest, whose notebook checks compare what cells print."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=unit, disable=bool(os.environ.get("PYTEST_CURRENT_TEST")))
