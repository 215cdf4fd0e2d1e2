"""The lab's batch runner: every notebook in order with papermill, then the checker's table.

    python -m minitrain.lab [--skip-tests]     # what `make lab` runs

It executes the numbered notebooks in `notebooks/` in order, with `run.ipynb` for 1 and for 2
processes just before the report notebook; a notebook whose parameters cell has `live_run` runs
with it off (it shows its committed measurement). It ends with the checker's table for the output
folder and exits non-zero when anything failed.

Environment:
    MINITRAIN_LAB_OUT      where runs and artifacts go (default: experiments/35-ddp-cpu/)
    MINITRAIN_LAB_SCRATCH  where throw-away demo files go (default: build/lab/)
"""

import argparse
import os
import sys
import time
from pathlib import Path

from minitrain.lab.check import check_folder, format_table
from minitrain.lab.runs import output_dir, run_dir
from minitrain.paths import BUILD_DIR, NOTEBOOKS_DIR

EXECUTED_DIR = BUILD_DIR / "notebooks"  # executed copies of the topic notebooks (git-ignored)
RUN_NOTEBOOK = "run.ipynb"
REPORT_NOTEBOOK = "06-scaling-and-report.ipynb"  # the 1- and 2-process runs come just before it
KERNEL = "python3"  # papermill resolves it to the calling interpreter


def numbered_notebooks() -> list[str]:
    """notebooks/NN-*.ipynb, in order: the lab's path, then the deeper measurements."""
    return sorted(p.name for p in NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb"))


def lab_parameters(name: str) -> dict:
    """Parameters `make lab` gives a notebook: `live_run=False` where it has that parameter."""
    import papermill

    declared = papermill.inspect_notebook(str(NOTEBOOKS_DIR / name))
    return {"live_run": False} if "live_run" in declared else {}


# ------------------------------------------------------------------------------------------------
# The batch runner


def _execute(src: Path, dst: Path, parameters: dict | None = None) -> float:
    """Execute one notebook with papermill into `dst`; return the elapsed seconds."""
    import papermill

    dst.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    papermill.execute_notebook(str(src), str(dst), parameters=parameters or {}, kernel_name=KERNEL,
                               cwd=str(src.parent), progress_bar=False)
    return time.perf_counter() - start


def plan() -> list[tuple[str, Path, dict]]:
    """(notebook, executed copy, parameters) in the order the lab runs them."""
    steps = []
    for name in numbered_notebooks():
        if name == REPORT_NOTEBOOK:
            steps += [(RUN_NOTEBOOK, run_dir(nproc) / f"run-{nproc}proc.ipynb",
                       {"nproc": nproc, "out_dir": str(run_dir(nproc))}) for nproc in (1, 2)]
        steps.append((name, EXECUTED_DIR / name, lab_parameters(name)))
    return steps


def refresh_committed(names: list[str] | None = None) -> None:
    """Re-execute the committed notebooks in place, top to bottom in a clean kernel each.

    Run this after editing a notebook, before committing it: the kernel runs in notebooks/ with
    every output in a temporary folder, exactly as `pytest --nbval notebooks` runs it, so the
    stored outputs of the checked cells are what nbval will compare against.
    """
    import tempfile

    import nbformat
    from nbclient import NotebookClient

    names = names or [*numbered_notebooks(), RUN_NOTEBOOK]  # nbval's order
    with tempfile.TemporaryDirectory(prefix="minitrain-refresh-") as root:
        os.environ["MINITRAIN_LAB_OUT"] = os.path.join(root, "out")
        os.environ["MINITRAIN_LAB_SCRATCH"] = os.path.join(root, "scratch")
        for name in names:
            path = NOTEBOOKS_DIR / name
            start = time.perf_counter()
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, kernel_name=KERNEL, timeout=600,
                           resources={"metadata": {"path": str(NOTEBOOKS_DIR)}}).execute()
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs = _coalesce_streams(cell.outputs)
            nbformat.write(nb, path)
            print(f"{name}: executed in place in {time.perf_counter() - start:.1f} s", flush=True)


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
    p = argparse.ArgumentParser(description="Execute the whole notebook lab with papermill, then check it.")
    p.add_argument("--skip-tests", action="store_true", help="do not run the DDP tests in the final check")
    p.add_argument("--refresh-committed", nargs="*", metavar="NOTEBOOK",
                   help="instead: re-execute the lab's committed notebooks (or the ones named) in "
                        "place, with outputs in a temporary folder, ready to commit")
    args = p.parse_args(argv)
    if args.refresh_committed is not None:
        refresh_committed(args.refresh_committed)
        return 0

    import papermill

    out = output_dir().resolve()
    os.environ["MINITRAIN_LAB_OUT"] = str(out)  # the kernels inherit it: every notebook agrees
    print(f"lab output folder: {out}\nexecuted topic notebooks: {EXECUTED_DIR}", flush=True)
    total = time.perf_counter()
    failed = None
    steps = plan()
    for i, (name, dst, parameters) in enumerate(steps, start=1):
        shown = " ".join(f"{k}={v!r}" for k, v in parameters.items() if k != "out_dir")
        print(f"[{i}/{len(steps)}] {name} {shown}".rstrip() + " ...", flush=True)
        try:
            seconds = _execute(NOTEBOOKS_DIR / name, dst, parameters)
        except papermill.PapermillExecutionError as e:
            print(f"      FAILED in cell {e.exec_count}: {e.ename}: {e.evalue}\n"
                  f"      see the executed copy: {dst}", flush=True)
            failed = name
            break
        print(f"      done in {seconds:.1f} s -> {dst}", flush=True)
    print(f"notebooks: {time.perf_counter() - total:.1f} s", flush=True)

    print(f"\nchecker ({'without' if args.skip_tests else 'with'} the DDP tests) on {out}:", flush=True)
    start = time.perf_counter()
    results = check_folder(out, run_tests=not args.skip_tests)
    print(format_table(results))
    print(f"checker: {time.perf_counter() - start:.1f} s; lab total: {time.perf_counter() - total:.1f} s")
    if failed:
        print(f"FAILED: notebook {failed}", file=sys.stderr)
        return 1
    if not all(r.passed for r in results):
        print("FAILED: the checker found a problem (FAIL rows above)", file=sys.stderr)
        return 1
    print("lab complete: every notebook ran and every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
