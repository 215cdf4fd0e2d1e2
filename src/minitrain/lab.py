"""The notebook lab: where its runs go, small helpers its cells call, and the batch runner.

    python -m minitrain.lab [--skip-tests]     # what `make lab` runs

The runner executes the notebooks in `notebooks/` with papermill, in the lab's order: the topic
notebooks, `run.ipynb` for 1 and for 2 processes, the report notebook, then the notebooks of the
deeper measurements; it ends with the checker's table for the output folder and exits non-zero
when anything failed.

Environment:
    MINITRAIN_LAB_OUT      where runs and artifacts go (default: experiments/35-ddp-cpu/)
    MINITRAIN_LAB_SCRATCH  where throw-away demo files go (default: build/lab/)
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from minitrain.check import check_folder, format_table
from minitrain.experiment import EXPERIMENT_DIR

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO / "notebooks"
BUILD_DIR = REPO / "build" / "notebooks"  # executed copies of the topic notebooks (git-ignored)
TOPIC_NOTEBOOKS = ("01-ddp-cpu.ipynb", "02-sharding.ipynb", "03-wrapping.ipynb",
                   "04-launch-and-timing.ipynb", "05-verification.ipynb")
RUN_NOTEBOOK = "run.ipynb"
REPORT_NOTEBOOK = "06-scaling-and-report.ipynb"
# the deeper measurements: `make lab` shows their committed results (their live demos stay off;
# each has its own command to re-measure), nbval runs them with the demos on
BEYOND_NOTEBOOKS = {"07-allreduce-benchmark.ipynb": {}, "08-when-two-processes-win.ipynb": {"run_demo": False},
                    "09-controls-and-learning.ipynb": {"live_run": False},
                    "10-the-wire-during-training.ipynb": {"live_run": False}}
KERNEL = "python3"  # papermill resolves it to the calling interpreter


def output_dir() -> Path:
    """Where the lab's runs and artifacts go: $MINITRAIN_LAB_OUT, else experiments/35-ddp-cpu/."""
    env = os.environ.get("MINITRAIN_LAB_OUT")
    return Path(env) if env else EXPERIMENT_DIR


def run_dir(nproc: int) -> Path:
    """The folder of the `nproc`-process run: output_dir() for 2, its single-process/ for 1."""
    from minitrain.report import SINGLE_DIR

    return output_dir() / SINGLE_DIR if nproc == 1 else output_dir()


def scratch_dir(name: str) -> Path:
    """A folder for throw-away demo files: $MINITRAIN_LAB_SCRATCH/name, else build/lab/name."""
    env = os.environ.get("MINITRAIN_LAB_SCRATCH")
    path = (Path(env) if env else REPO / "build" / "lab") / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def has_run(folder: Path) -> bool:
    """True when `folder` holds a finished run (train.py moves run.json into place last)."""
    return (Path(folder) / "run.json").is_file() and (Path(folder) / "timings.jsonl").is_file()


# ------------------------------------------------------------------------------------------------
# Helpers the notebooks call


def machine_facts() -> list[tuple[str, str]]:
    """What the lab needs from this machine, as (what, value) rows."""
    import platform

    import torch
    import torch.distributed as dist

    from minitrain.provenance import cpu_model, usable_cores

    return [("python", platform.python_version()),
            ("torch", torch.__version__),
            ("gloo available", str(dist.is_gloo_available())),
            ("CUDA used", "no (CPU only, on purpose)"),
            ("usable cores", str(usable_cores())),
            ("torch threads in this kernel", str(torch.get_num_threads())),
            ("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "(not set)")),
            ("CPU", cpu_model())]


def format_rows(rows: list[tuple], headers: tuple[str, ...] | None = None) -> str:
    """A plain-text table with left-aligned columns."""
    rows = [tuple(str(c) for c in r) for r in rows]
    if headers:
        rows = [tuple(headers)] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if headers:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def timing_table(timings: list[dict], warmup: int) -> str:
    """Variant A and variant B over the steps after the warm-up: mean, median, p95 in ms."""
    from minitrain.timing import summarize

    measured = timings[warmup:]
    rows = []
    for key, label in (("backward_allreduce_ms", "A: barrier | backward + all-reduce | barrier"),
                       ("allreduce_ms", "B: comm hook, the all-reduce alone")):
        values = [r[key] for r in measured if r.get(key) is not None]
        if values:
            s = summarize(values)
            rows.append((label, f"{s['mean']:.2f}", f"{s['median']:.2f}", f"{s['p95']:.2f}"))
    step = summarize([r["step_ms"] for r in measured])
    rows.append(("whole step (for scale)", f"{step['mean']:.2f}", f"{step['median']:.2f}", f"{step['p95']:.2f}"))
    return (f"over steps {warmup}..{len(timings) - 1} ({len(measured)} steps), in ms\n"
            + format_rows(rows, headers=("variant", "mean", "median", "p95")))


def plot_timing_variants(timings: list[dict], warmup: int):
    """Variant A and B per step (left) and their distributions after the warm-up (right)."""
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in timings]
    a = [r["backward_allreduce_ms"] for r in timings]
    b = [r["allreduce_ms"] for r in timings]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(steps, a, label="A: backward + all-reduce + wait (barriers)", color="#4c72b0")
    ax1.plot(steps, b, label="B: all-reduce alone (comm hook)", color="#c44e52")
    ax1.axvspan(0, warmup - 0.5, color="0.9", label=f"warm-up (first {warmup} steps, not summarized)")
    ax1.set_xlabel("step")
    ax1.set_ylabel("ms")
    ax1.set_yscale("log")
    ax1.set_title("Per step")
    ax1.legend(fontsize=8)
    measured_a, measured_b = a[warmup:], b[warmup:]
    ax2.hist(measured_a, bins=20, alpha=0.7, color="#4c72b0", label=f"A (median {statistics.median(measured_a):.1f} ms)")
    ax2.hist(measured_b, bins=20, alpha=0.7, color="#c44e52", label=f"B (median {statistics.median(measured_b):.2f} ms)")
    ax2.set_xlabel("ms")
    ax2.set_ylabel("steps")
    ax2.set_title(f"Distribution over the last {len(measured_a)} steps")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


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
    steps = [(name, BUILD_DIR / name, {}) for name in TOPIC_NOTEBOOKS]
    for nproc in (1, 2):
        folder = run_dir(nproc)
        steps.append((RUN_NOTEBOOK, folder / f"run-{nproc}proc.ipynb",
                      {"nproc": nproc, "out_dir": str(folder)}))
    steps.append((REPORT_NOTEBOOK, BUILD_DIR / REPORT_NOTEBOOK, {}))
    steps += [(name, BUILD_DIR / name, parameters) for name, parameters in BEYOND_NOTEBOOKS.items()]
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

    names = names or [*TOPIC_NOTEBOOKS, REPORT_NOTEBOOK, *BEYOND_NOTEBOOKS, RUN_NOTEBOOK]  # nbval's order
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
    print(f"lab output folder: {out}\nexecuted topic notebooks: {BUILD_DIR}", flush=True)
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
