"""The one shape of a deeper measurement: a plan (with its quick mode), a run into a folder, a
results file NAME.json holding its provenance and its findings as short records, and figures.

Each measurement module defines `MEASUREMENT = Measurement(...)` with the parts that are its own
(measure, findings, plot, report); `Measurement.run` and `Measurement.main` are the rest, once.
`minitrain.measure.registry()` finds them. The lab's report reads the findings from the JSON
files, never from this code.
"""

import argparse
import contextlib
import json
import os
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from minitrain.cli import LabArgumentParser, output_folder
from minitrain.corpus import ensure_corpus
from minitrain.ddp import cleanup, init_distributed
from minitrain.lab.reporting.report import findings_table
from minitrain.lab.reporting.results_file import Finding, Provenance, read_results_file, write_results_file
from minitrain.lab.reporting.sittings import sitting_of
from minitrain.launch import run_ranks
from minitrain.paths import BEYOND_DIR, BUILD_DIR, DEFAULT_CORPUS_DIR, relative
from minitrain.provenance import machine_provenance, provenance

WORLD_SIZE = 2  # the ranks of a measurement that starts itself under torchrun
PLAN_FILE = "plan.json"  # what the driver hands its workers: the plan itself and the corpus


class CannotRun(RuntimeError):
    """This machine cannot run the measurement; the message says why (main prints it in one line)."""


@dataclass(frozen=True)
class Measurement:
    name: str  # writes NAME.json; `python -m minitrain.measure.NAME` runs it
    title: str
    notebook: str  # the notebook that shows it, in notebooks/
    figures: tuple[str, ...]
    measure: Callable[..., dict]  # measure(out, plan, corpus_dir, echo, **options) -> results, no provenance
    findings: Callable[[dict], list[Finding]]
    plot: Callable[[dict, Path], None]  # plot(results, out): the figures into the folder `out`
    report: Callable[[dict], str]  # what `python -m` prints before the "wrote" line
    quick_help: str
    plan: type | None = None  # a dataclass with a `quick()` classmethod; None: no plan
    worker: Callable[..., dict] | None = None  # one rank under torchrun: (plan, corpus_dir, work, rank, world_size)
    options: Callable[[argparse.ArgumentParser], None] | None = None  # its own command-line options
    corpus: bool = True  # trains on the corpus (takes --corpus-dir)
    written: Callable[[dict], list[str]] = lambda results: []  # files beyond NAME.json and the figures

    @property
    def module(self) -> str:
        return f"{__package__}.{self.name}"

    @property
    def result_file(self) -> str:
        return f"{self.name}.json"

    def load(self, path: str | Path = "") -> dict:
        """Results of a run: `path` is NAME.json or the folder holding it; empty: the committed ones.
        The envelope is checked and typed (read_results_file); the rest stays the measurement's own dicts."""
        path = Path(path) if path else BEYOND_DIR
        return read_results_file(path / self.result_file if path.is_dir() else path, self.name)

    def run(self, out: Path = BEYOND_DIR, quick: bool = False, corpus_dir: Path = DEFAULT_CORPUS_DIR,
            echo: Callable[[str], None] = print, plan: Any = None, **options: Any) -> dict:
        """Measure into `out` (the plan: `plan`, else Plan.quick() or Plan()), then write NAME.json with
        provenance and findings, and the figures; return the results."""
        started = time.perf_counter()
        out, corpus_dir = Path(out), Path(corpus_dir)
        out.mkdir(parents=True, exist_ok=True)
        if self.corpus:
            ensure_corpus(corpus_dir)
        if plan is None and self.plan is not None:
            plan = self.plan.quick() if quick else self.plan()
        results = self.measure(out, plan, corpus_dir, echo, **options)
        corpus = {"corpus_dir": corpus_dir} if self.corpus else {}
        command = command_line(self.module, out, quick, **options, **corpus)
        results = write_results(out, self, results, self.findings(results), command, started,
                                corpus_dir if self.corpus else None)
        self.plot(results, out)
        return results

    def main(self, argv: list[str] | None = None) -> None:
        """`python -m minitrain.measure.NAME [--out DIR] [--quick] [--corpus-dir DIR] [its options]`."""
        p = LabArgumentParser(prog=f"python -m {self.module}", description=self.title)
        p.add_argument("--out", type=output_folder, default=BEYOND_DIR,
                       help=f"output folder (default: {relative(BEYOND_DIR)})")
        p.add_argument("--quick", action="store_true", help=self.quick_help)
        if self.corpus:
            p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
        if self.worker:
            p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # one rank, under torchrun: its folder
        if self.options:
            self.options(p)
        args = vars(p.parse_args(argv))
        if work := args.pop("worker", None):
            return run_worker(self, work)
        out, quick = args.pop("out"), args.pop("quick")
        try:
            results = self.run(out, quick, **args)
        except CannotRun as e:
            p.error(str(e))
        print(self.report(results))
        print(findings_table(results["findings"]))
        files = [self.result_file, *self.figures, *self.written(results)]
        print(f"wrote {', '.join(files[:-1])} and {files[-1]} to {relative(out)} "
              f"in {results['provenance'].runtime_s:.0f} s")


def relaunch(measurement: Measurement, plan: Any, corpus_dir: Path, work: Path, timeout: float,
             echo: Callable[[str], None] = print) -> list[dict]:
    """Run the measurement's worker under the lab's torchrun (run_ranks: WORLD_SIZE ranks, loopback only),
    handing it the plan in work/plan.json; each rank's note, by rank."""
    (work / PLAN_FILE).write_text(json.dumps({"plan": asdict(plan), "corpus_dir": str(corpus_dir)}))
    run_ranks(measurement.module, WORLD_SIZE, "--worker", str(work), module=True, timeout=timeout, echo=echo)
    return [json.loads((work / f"rank-{r}.json").read_text()) for r in range(WORLD_SIZE)]


def run_worker(measurement: Measurement, work: Path) -> None:
    """One rank under torchrun: read the plan, join the process group, run the worker, leave its note."""
    spec = json.loads((work / PLAN_FILE).read_text())
    plan = measurement.plan(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["plan"].items()})
    rank, world_size = init_distributed("gloo")
    note = measurement.worker(plan, Path(spec["corpus_dir"]), work, rank, world_size)
    (work / f"rank-{rank}.json").write_text(json.dumps(note))
    cleanup()


def show_checks(checks: dict[str, bool]) -> None:
    """Print a live run's checks, one line each, and fail naming those that do not hold."""
    print("\n".join(f"{fact}: {holds}" for fact, holds in checks.items()))
    failed = [fact for fact, holds in checks.items() if not holds]
    if failed:
        raise AssertionError(f"a check of the live run failed: {'; '.join(failed)}")


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


def as_typed(command: list[str]) -> str:
    """A command as a reader types it: `python`, paths relative to the repository, quoted for the shell."""
    return shlex.join("python" if w == sys.executable else relative(w) if os.path.isabs(w) else w for w in command)


def write_results(out: Path, measurement: Measurement, results: dict, findings: list[Finding],
                  command: str, started: float, corpus_dir: Path | None = None) -> dict:
    """Add `provenance` (machine, corpus, command, run time) and `findings` to `results`; write NAME.json."""
    machine = machine_provenance() if corpus_dir is None else provenance(corpus_dir)
    prov = Provenance(**machine, run_id=secrets.token_hex(4),  # names this run wherever it is shown
                      command=command, runtime_s=round(time.perf_counter() - started, 1))
    results = results | {"measurement": measurement.name, "findings": findings, "provenance": prov}
    write_results_file(Path(out) / measurement.result_file, results)
    return results


def provenance_line(results: dict, what: str = "") -> str:
    """Where, when and under what load a result was measured, and the command that repeats it."""
    p: Provenance = results["provenance"]
    run_id = f"run id {p.run_id}, " if p.run_id else ""  # results written before run ids: none
    return ((f"{what}\n" if what else "") + f"{run_id}measured {p.date} on {p.cores} logical CPUs, "
            f"sitting {sitting_of(results)}, torch {p.torch}, load average {p.load_average_1min:.1f} "
            f"at the end (its own processes count), {p.runtime_s:.0f} s\ncommand: {p.command}")


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
