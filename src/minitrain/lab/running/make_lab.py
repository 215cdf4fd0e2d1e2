"""The lab's batch runner: the measured runs alone, then every notebook and the checker.

    python -m minitrain.lab [--skip-tests]     # what `make lab` runs

First the runs whose timings the lab reports, one at a time with nothing else running: `run.ipynb` for 1
and for 2 processes with papermill (the sheet's runs), then the alternating repeats of the 1-vs-2
comparison (their jobs start up once rank 0 of the 2-process run has put its run.json in place: every
step done, every rank's files staged; its notebook ends meanwhile, and their first turn waits for that
end). Runs already in the output folder, complete and of the same configuration, are reused
(minitrain.lab.running.reuse; --remeasure and --commit measure them all again), so a paragraph written
from them in notebook 06 still matches; before measuring, the lab waits a little for a busy machine to
calm down (minitrain.lab.running.load; --busy-ok goes on at once, with a warning). Then the report
notebook, with the checker's DDP tests beside it (they read no run), then the rest of the sheet's path
(02-05), `--workers` at a time, with the checker of the artifacts beside them (a notebook whose
parameters cell has `live_run` runs with it off: it reads the runs just made). The optional notebooks
07-19 show their own committed measurements, not these runs: `--all-notebooks` executes them too. Once
they have all run, the seconds each took go to notebook-times.json in the output folder, and 01 runs
last, so that its path table shows this lab run's times (minitrain.lab.running.notebook_times); its own
time is added after. When everything passed and the runs went to experiments/35-ddp-cpu/, the executed
notebooks replace those in notebooks/, so that the notebooks show the run beside them. Exits non-zero
when anything failed, naming where the executed notebooks are and the one next step.

Where the runs go (lab_out): in the reference edition build/35-ddp-cpu/, so that `make lab` leaves the
committed artifacts alone (`--commit`, which `make measurements` passes, writes experiments/35-ddp-cpu/
and notebooks/); in the student edition experiments/35-ddp-cpu/, the learner's run, as the sheet says.

Environment:
    MINITRAIN_LAB_OUT      where runs and artifacts go (default: lab_out())
    MINITRAIN_LAB_SCRATCH  where throw-away demo files go (default: build/lab/)
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from minitrain.cli import LabArgumentParser, SettingError, lab_out_folder, positive_int
from minitrain.lab.reporting.stop_conditions import CheckResult, check_artifacts, check_tests, format_table
from minitrain.lab.reporting.runs import output_dir, run_dir_in
from minitrain.lab.running.execute_notebook import without_iri_grammar
from minitrain.lab.running.whole_experiment import REPEATS, STEPS, WARMUP
from minitrain.lab.running.load import NEXT_STEP as QUIET_FIRST
from minitrain.lab.running.load import MachineBusy, wait_until_quiet
from minitrain.lab.running.notebook_times import ENTRY_NOTEBOOK, LAST_ON_THE_PATH, lab_run, numbered_notebooks, write_times
from minitrain.lab.running.alternating_repeats import POLL_S, run_repeats
from minitrain.lab.running.reuse import plan_runs, remove_stale_repeats
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import BY_KEY
from minitrain.launch import LaunchError, stop_process_tree
from minitrain.paths import BUILD_DIR, EXPERIMENT_DIR, NOTEBOOKS_DIR, STUDENT_EDITION, relative

EXECUTED_DIR = BUILD_DIR / "notebooks"  # executed copies of the topic notebooks (git-ignored)
REFERENCE_LAB_OUT = BUILD_DIR / EXPERIMENT_DIR.name  # the reference edition's `make lab` runs (git-ignored)
RUN_NOTEBOOK = "run.ipynb"
REPORT_NOTEBOOK = LAST_ON_THE_PATH  # writes the manifest the others read


def lab_parameters(name: str, repeats: int) -> dict:
    """Parameters `make lab` gives a notebook, where it declares them: `live_run=False` (the runs
    are made already, with nothing of the lab's beside them) and the number of repeats made."""
    without_iri_grammar()
    import papermill

    declared = papermill.inspect_notebook(str(NOTEBOOKS_DIR / name))
    given = {"live_run": False, "repeats": repeats}
    return {key: value for key, value in given.items() if key in declared}


def lab_out(commit: bool) -> Path:
    """Where this lab run writes: $MINITRAIN_LAB_OUT, else experiments/35-ddp-cpu/ with `commit` or in the
    student edition, else build/35-ddp-cpu/. SettingError for a MINITRAIN_LAB_OUT that is a file, or
    one that is not experiments/35-ddp-cpu/ with `commit`."""
    chosen = lab_out_folder()
    if commit and chosen is not None and chosen.resolve() != EXPERIMENT_DIR.resolve():
        raise SettingError(f"--commit writes {relative(EXPERIMENT_DIR)}/, but MINITRAIN_LAB_OUT={chosen} names "
                           "another folder: unset MINITRAIN_LAB_OUT, or leave out --commit")
    return chosen or (EXPERIMENT_DIR if commit or STUDENT_EDITION else REFERENCE_LAB_OUT)


class Execution:
    """One notebook executing with papermill in its own process (papermill's `cwd` is a process-wide
    chdir, so notebooks run side by side only as separate processes); `wait` returns its seconds."""

    def __init__(self, src: Path, dst: Path, parameters: dict) -> None:
        self.src, self.dst, self.start = src, dst, time.perf_counter()
        self.stderr = tempfile.TemporaryFile("w+")  # a file, not a pipe: nothing blocks while no one reads
        self.proc = subprocess.Popen([sys.executable, "-m", "minitrain.lab.execute", str(src), str(dst),
                                      json.dumps(parameters)], stdout=subprocess.DEVNULL, stderr=self.stderr, text=True)

    def wait(self) -> float:
        """Seconds from its start to its end (call it once); NotebookFailed when it raised."""
        status, seconds = self.proc.wait(), time.perf_counter() - self.start
        with self.stderr:  # closed once read
            if status != 0:
                self.stderr.seek(0)
                raise NotebookFailed(f"{self.src.name} failed; see the executed copy {self.dst}\n"
                                     + _error_of(self.stderr.read()))
        return seconds

    def wait_for_run(self, folder: Path, since: float) -> None:
        """Until `folder` holds run.json written after `since` (time.time()): every rank's last step is done
        and its files staged; or until the notebook has ended (NotebookFailed if it failed)."""
        run = Path(folder) / "run.json"
        while self.proc.poll() is None and not (run.is_file() and run.stat().st_mtime > since):
            time.sleep(POLL_S)
        if self.proc.poll() not in (None, 0):
            self.wait()


def execute(src: Path, dst: Path, parameters: dict) -> float:
    """Execute one notebook with papermill into `dst`, in its own process; return seconds."""
    return Execution(src, dst, parameters).wait()


def not_done(text: str) -> str | None:
    """A TODO still blank, in one line: what, where (the stub's file and line, or the notebook whose cell
    raised), and what to do."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if stop := blank.stop_in(line):  # a notebook's stop
            return f"{stop.replace(' (shown above)', '')}, then run make lab again"
        if (todo := blank.raised_in(line)) is not None:
            what = blank.said(todo)
            where = [re.search(r'File "([^"]+)", line (\d+)', earlier) for earlier in lines[:i]]
            notebook = re.match(r"(\S+\.ipynb) failed", text)  # a notebook's own cell (Block G's): no File line
            at = next((f" ({relative(Path(m[1]))}:{m[2]})" for m in reversed(where) if m),
                      f" (notebooks/{notebook[1]})" if notebook else "")
            return f"{what}{at}: write it, then run make lab again"
    return None


AGAIN = "run make lab again: it reuses your complete runs and measures only what is missing"
REMEASURE = ".venv/bin/python -m minitrain.lab --remeasure"
WRITE_FIRST = f"write each TODO named above (README's TODO table gives its file), then {AGAIN}"  # blanks stopped it
NOTEBOOK_STEP = f"fix the cell the error above names (the executed copy shows it), save the notebook, then {AGAIN}"
# the next step for the checker's first FAIL row, by its name (minitrain.lab.reporting.stop_conditions.check_artifacts)
ROW_STEPS = {
    "files": f"measure every run again and rewrite every file: {REMEASURE}",
    "equivalence": f"the ranks' weights differ: make grade names the mistake in Blocks A and C; fix it, then "
                   f"{REMEASURE}",
    "allreduce timing": f"make grade names the mistake in Block D ({BY_KEY['D'].file}); fix it, then {REMEASURE}",
    "lesson notes": ("edit my_paragraph in notebook 06's cell under \"Block G: your paragraph\" to your manifest's "
                     "figures, run it and the cell after it until stop condition 4 says PASS, save the notebook, then "
                     ".venv/bin/python -m minitrain.lab --notebooks-only"),
    "ddp tests": (f"fix what .venv/bin/python -m pytest tests/minitrain/test_ddp.py names (Block A: "
                  f"{BY_KEY['A'].file}), then {AGAIN}"),
}


def notebooks_failed(failures: list[str]) -> tuple[str, str]:
    """What failed, for the FAILED line (one line per notebook that raised, the first on that line: a blank TODO
    named in one line), and the next step."""
    stops = [not_done(f) for f in failures]
    return "\n".join(line or f for line, f in zip(stops, failures)), WRITE_FIRST if all(stops) else NOTEBOOK_STEP


def failed(what: str, next_step: str, out: Path) -> int:
    """Report a failed lab run on stderr: what failed, where the executed notebooks are, then the one next
    step that fixes it; return the exit status, 1."""
    runs = [run_dir_in(out, n) / f"run-{n}proc.ipynb" for n in (1, 2)]
    print(f"FAILED: {what}\nexecuted notebooks: {relative(EXECUTED_DIR)}/ (the runs': "
          f"{', '.join(relative(r) for r in runs)})\nnext: {next_step}", file=sys.stderr, flush=True)
    return 1


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names it, the executed copy, and the error."""


def _error_of(stderr: str) -> str:
    """The last lines of papermill's report: the exception and its message."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "\n".join(lines[-6:])


def measured_phase(out: Path, repeats: int, remeasure: bool = True, busy_ok: bool = False, steps: int = STEPS,
                   warmup: int = WARMUP) -> bool:
    """The runs whose timings the lab reports, one at a time with nothing else on the machine, once it is
    quiet (minitrain.lab.running.load): run.ipynb for 1 and 2 processes (the sheet's runs), then the
    alternating repeats, whose jobs start up once the 2-process run's run.json is in place (every step
    done; its notebook ends meanwhile) and take their first turn once that notebook has ended. Without
    `remeasure`, only the runs missing or unfit for reuse (minitrain.lab.running.reuse). True when the
    sheet's 2-process run was measured now."""
    plan = plan_runs(out, steps, warmup, repeats, remeasure)
    print("\n".join(plan.lines(out, repeats)), flush=True)
    if plan.nothing_to_measure:
        print("  nothing to measure (--remeasure measures every run again)", flush=True)
        return False
    wait_until_quiet(busy_ok)

    def start(nproc: int) -> tuple[Path, Execution]:
        folder = run_dir_in(out, nproc)
        # relative to notebooks/, where the kernel runs: no machine path in the executed copy
        parameters = {"nproc": nproc, "steps": steps, "warmup": warmup, "out_dir": os.path.relpath(folder, NOTEBOOKS_DIR)}
        return folder, Execution(NOTEBOOKS_DIR / RUN_NOTEBOOK, folder / f"run-{nproc}proc.ipynb", parameters)

    def ended(nproc: int, folder: Path, notebook: Execution) -> None:
        print(f"  {RUN_NOTEBOOK} nproc={nproc}: {notebook.wait():.1f} s -> {relative(folder)}", flush=True)

    if plan.sheet[1] is not None:
        ended(1, *start(1))
    if plan.repeats is not None:
        remove_stale_repeats(out, repeats)
    if plan.sheet[2] is None:
        if plan.repeats is not None:
            run_repeats(out, repeats, steps, warmup)
        return False
    since = time.time()
    folder, notebook = start(2)
    if plan.repeats is None:
        ended(2, folder, notebook)
        return True
    notebook.wait_for_run(folder, since)
    try:
        run_repeats(out, repeats, steps, warmup, before_turns=lambda: ended(2, folder, notebook))
    finally:
        if notebook.proc.poll() is None:  # run_repeats failed before its first turn: the notebook goes too
            stop_process_tree(notebook.proc)
    return True


def display_phase(names: list[str], run_tests: bool, workers: int, repeats: int,
                  run_record: dict) -> tuple[list[CheckResult], list[str]]:
    """The notebooks `names`, `workers` at a time: the report first (the others read what it writes), the
    entry notebook last (it shows the others' times, written to notebook-times.json). Beside them the
    checker: its DDP tests from the start (they read no run), the artifacts once the report has run.
    Return the checker's rows and the failures; `run_record` (notebook_times.lab_run): which lab run."""
    failures: list[str] = []
    seconds: dict[str, float | None] = {}

    def run(name: str) -> None:
        seconds[name] = None  # until it ends well
        seconds[name] = execute(NOTEBOOKS_DIR / name, EXECUTED_DIR / name, lab_parameters(name, repeats))
        print(f"  {name}: {seconds[name]:.1f} s", flush=True)

    def tests() -> CheckResult:
        start = time.perf_counter()
        result = check_tests(run_tests)
        if run_tests:
            print(f"  checker's DDP tests: {time.perf_counter() - start:.1f} s", flush=True)
        return result

    def run_all(batch: list[str]) -> None:
        for job in as_completed([notebooks.submit(run, name) for name in batch]):
            try:
                job.result()
            except NotebookFailed as e:
                failures.append(str(e))

    out = output_dir()
    with ThreadPoolExecutor(max_workers=2) as checker, ThreadPoolExecutor(max_workers=workers) as notebooks:
        ddp_tests = checker.submit(tests)
        try:
            run(REPORT_NOTEBOOK)
        except NotebookFailed as e:
            return [ddp_tests.result()], [str(e)]
        artifacts = checker.submit(check_artifacts, out)
        run_all([name for name in names if name not in (REPORT_NOTEBOOK, ENTRY_NOTEBOOK)])
        if ENTRY_NOTEBOOK in names:  # last: its table shows the times written now
            write_times(out, seconds, run_record)
            run_all([ENTRY_NOTEBOOK])
        print(f"  notebook times: {relative(write_times(out, seconds, run_record))}", flush=True)
        return artifacts.result() + [ddp_tests.result()], failures


def notebook_stamps() -> dict[str, int]:
    """Each notebook's modification time, to tell whether someone saved it while the lab ran."""
    return {p.name: p.stat().st_mtime_ns for p in NOTEBOOKS_DIR.glob("*.ipynb")}


def commit_notebooks(names: list[str], stamps: dict[str, int], with_run: bool = True) -> list[str]:
    """Copy the executed notebooks of this lab run over the ones in notebooks/, without papermill's
    injected-parameters cell and metadata, so the notebooks show the run whose artifacts sit beside
    them (`run.ipynb` from its 2-process execution, the sheet's run, when this lab run made it)."""
    import nbformat

    executed_copies = {name: EXECUTED_DIR / name for name in names}
    names = []
    if with_run:
        executed_copies[RUN_NOTEBOOK] = run_dir_in(output_dir(), 2) / "run-2proc.ipynb"
    for name, executed in executed_copies.items():
        if notebook_stamps().get(name) != stamps.get(name):  # saved meanwhile: what you wrote wins
            print(f"{name} left as it is: it was saved while the lab ran", flush=True)
            continue
        nb = nbformat.read(executed, as_version=4)
        nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
        nb.metadata.pop("papermill", None)
        count = 0
        for cell in nb.cells:
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
            if cell.cell_type == "code":
                count += 1
                cell.execution_count = count
                cell.outputs = _coalesce_streams(cell.outputs)
                for output in cell.outputs:
                    if "execution_count" in output:
                        output.execution_count = count
        nbformat.write(nb, NOTEBOOKS_DIR / name)
        names.append(name)
    return names


def _coalesce_streams(outputs: list) -> list:
    """Merge consecutive stream outputs of the same name (a streamed log: one output, not 100)."""
    merged: list = []
    for out in outputs:
        if (out.output_type == "stream" and merged and merged[-1].output_type == "stream"
                and merged[-1].name == out.name):
            merged[-1].text += out.text
        else:
            merged.append(out)
    return merged


def main(argv: list[str] | None = None) -> int:
    p = LabArgumentParser(prog="python -m minitrain.lab", description="Run the whole notebook lab (measured runs first, alone), then check it.",
                          epilog=f"Runs and artifacts go to $MINITRAIN_LAB_OUT when it is set (a folder, created if missing), "
                                 f"else {relative(EXPERIMENT_DIR)}/ with --commit or in the student edition, else "
                                 f"{relative(REFERENCE_LAB_OUT)}/. Throw-away demo files: $MINITRAIN_LAB_SCRATCH, else build/lab/.")
    p.add_argument("--skip-tests", action="store_true", help="do not run the DDP tests in the final check")
    p.add_argument("--repeats", type=positive_int, default=REPEATS, help="repeats of the 1-vs-2 comparison (at least 1)")
    p.add_argument("--workers", type=positive_int, default=2, help="notebooks executed side by side after the measured runs")
    p.add_argument("--notebooks-only", action="store_true",
                   help="no new runs: execute the notebooks against the runs already in the output folder (after "
                        "editing a notebook, so the committed ones keep showing the committed run)")
    p.add_argument("--all-notebooks", action="store_true",
                   help="after the sheet's path (01-06), execute the optional notebooks 07-19 too (they show their "
                        "own committed measurements, not the runs just made)")
    p.add_argument("--remeasure", action="store_true",
                   help="measure every run again (without it, complete runs of the same steps, warm-up and repeats "
                        "in the output folder are reused, so a paragraph written from them still matches)")
    p.add_argument("--busy-ok", action="store_true",
                   help="measure even though other programs keep the machine busy (without it the lab waits up to "
                        "a minute and a half for the machine to calm down)")
    p.add_argument("--commit", action="store_true",
                   help=f"write into {relative(EXPERIMENT_DIR)}/, measuring every run again (none with --notebooks-only), "
                        "and, when everything passed, replace notebooks/ with the executed copies: the committed "
                        "artifacts (make measurements)")
    args = p.parse_args(argv)
    if args.notebooks_only and args.remeasure:
        p.error("--notebooks-only makes no runs, --remeasure measures them all: choose one")
    try:
        out = lab_out(args.commit).resolve()  # a bad MINITRAIN_LAB_OUT stops here, before any run
    except SettingError as e:
        p.error(str(e))

    os.environ["MINITRAIN_LAB_OUT"] = str(out)  # the kernels inherit it: every notebook agrees
    print(f"lab output folder: {relative(out)}; executed notebooks: {relative(EXECUTED_DIR)}", flush=True)
    if out == REFERENCE_LAB_OUT.resolve():
        print(f"(the committed runs in {relative(EXPERIMENT_DIR)}/ and notebooks/ stay as they are: --commit rewrites them)",
              flush=True)
    total, stamps = time.perf_counter(), notebook_stamps()  # papermill reads the notebooks as they are now
    run_record = lab_run(" ".join(["python -m minitrain.lab", *(sys.argv[1:] if argv is None else argv)]), args.workers)
    print("measured runs (nothing of the lab's beside them; other programs: the quiet machine row):" if not args.notebooks_only
          else "no new runs (--notebooks-only): the notebooks read the runs in the output folder", flush=True)
    measured_2proc = False
    try:
        if not args.notebooks_only:
            measured_2proc = measured_phase(out, args.repeats, args.remeasure or args.commit, args.busy_ok)
    except MachineBusy as e:
        return failed(str(e), QUIET_FIRST, out)
    except (NotebookFailed, LaunchError, TimeoutError) as e:
        stop = not_done(str(e))
        return failed(stop or str(e), WRITE_FIRST if stop else f"fix what the error above names, then {AGAIN}", out)
    measured = time.perf_counter() - total
    names = numbered_notebooks(args.all_notebooks)
    print(f"measured runs: {measured:.1f} s\nnotebooks {names[0][:2]}-{names[-1][:2]} ({args.workers} side by side) "
          f"and the checker ({'without' if args.skip_tests else 'with'} the DDP tests):", flush=True)
    results, failures = display_phase(names, not args.skip_tests, args.workers, args.repeats, run_record)
    if results:
        print(format_table(results))
    print(f"lab total: {time.perf_counter() - total:.1f} s (measured runs {measured:.1f} s, then "
          f"{time.perf_counter() - total - measured:.1f} s)", flush=True)
    if failures:
        return failed(*notebooks_failed(failures), out)
    if bad := [r for r in results if not r.passed]:
        return failed(f"the checker found a problem (FAIL rows above: {', '.join(r.name for r in bad)})",
                      ROW_STEPS.get(bad[0].name, f"fix what the {bad[0].name} row names, then {AGAIN}"), out)
    if out == EXPERIMENT_DIR.resolve():  # the lab's own artifacts: the notebooks show this run now
        print(f"notebooks/ now shows this run: {', '.join(commit_notebooks(names, stamps, measured_2proc))}")
    warned = [r.name for r in results if r.warning]
    print(f"lab complete: notebooks {names[0][:2]}-{names[-1][:2]} ran and every check passed"
          + (f" (read the WARN row above: {', '.join(warned)})" if warned else "")
          + ("" if args.all_notebooks else " (07-19 show their own committed measurements: --all-notebooks runs them)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
