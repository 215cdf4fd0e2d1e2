"""One command for the whole experiment: corpus, the sheet's 1- and 2-process runs, the repeats
of the fair 1-vs-2 comparison, plot, manifest.

    python -m minitrain.lab.experiment [--out DIR] [--steps 100] [--warmup 50] [--repeats 3]

The sheet's runs time the all-reduce both ways (variant A's two barriers per step make 2 processes
meet twice more, while in a group of 1 they cost next to nothing), so the throughput verdict
comes from separate repeats timed the same way for both (the comm hook only), alternating 1, 2, 1, 2, ...
(minitrain.lab.running.alternating_repeats: two jobs that stay up and take turns).
"""

import shutil
import sys
from pathlib import Path

from minitrain.cli import LabArgumentParser, nonnegative_int, output_folder, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.report import build_manifest, plot_scaling
from minitrain.lab.reporting.runs import has_run, read_repeats, run_dir_in
from minitrain.lab.running.load import busy_sentence, measure_load
from minitrain.lab.running.alternating_repeats import run_repeats
from minitrain.launch import run_ranks
from minitrain.paths import EXPERIMENT_DIR, TRAIN_SCRIPT


STEPS, WARMUP = 100, 50  # the sheet's run: 100 steps, the first 50 left out of the summary
REPEATS = 3  # of each process count; the verdict reports their range


def run_training(nproc: int, out: Path, steps: int, warmup: int, corpus_dir: Path,
                 timeout: float | None = None, timing: str | None = None, echo=print) -> None:
    """One real run of train.py under the lab's torchrun (run_ranks) with `nproc` processes, streamed to `echo`."""
    extra = [] if timing is None else ["--timing", timing]
    run_ranks(TRAIN_SCRIPT, nproc, "--out", str(out), "--steps", str(steps), "--warmup", str(warmup),
              "--corpus-dir", str(corpus_dir), *extra, timeout=timeout, echo=echo)


def ensure_runs(out: Path, steps: int, warmup: int, repeats: int, live_run: bool,
                timeout: float | None = None, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> None:
    """The sheet's two runs and the repeats in `out`: each found, or run now when `live_run`, or
    a clear error naming what is missing and the command that makes it."""
    ensure_corpus(corpus_dir)
    missing = [nproc for nproc in (1, 2) if not has_run(run_dir_in(out, nproc))]
    found = read_repeats(out)
    complete = len(found[1]) >= repeats and len(found[2]) >= repeats
    for nproc in (1, 2):
        print(f"the sheet's {nproc}-process run: {'missing' if nproc in missing else 'found'}")
    print(f"repeats: {len(found[1])} of 1 process and {len(found[2])} of 2 found, {repeats} wanted")
    if (missing or not complete) and not live_run:
        raise FileNotFoundError(f"{out} lacks runs; make them with `python -m minitrain.lab.experiment "
                                f"--out {out}` or set live_run = True")
    if missing or not complete:  # a notebook measures where make lab would first wait for a busy machine
        load = measure_load()
        print(f"WARNING: {busy_sentence(load)}; measuring anyway: repeats that disagree are marked disturbed "
              "(close the other programs and run again for numbers of your own)" if load.busy
              else f"the machine is quiet ({load}): measuring", flush=True)
    for nproc in missing:
        run_training(nproc, run_dir_in(out, nproc), steps, warmup, corpus_dir, timeout)
    if not complete:
        run_repeats(out, repeats, steps, warmup, corpus_dir, timeout)


def run_experiment(out: Path = EXPERIMENT_DIR, steps: int = STEPS, warmup: int = WARMUP,
                   corpus_dir: Path = DEFAULT_CORPUS_DIR, repeats: int = REPEATS,
                   command: str = "python -m minitrain.lab.experiment") -> Manifest:
    """Run everything into `out` and return the manifest, which records `command` as what made it."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ensure_corpus(corpus_dir)
    for nproc in (1, 2):
        print(f"== the sheet's {nproc}-process run -> {run_dir_in(out, nproc)}", flush=True)
        run_training(nproc, run_dir_in(out, nproc), steps, warmup, corpus_dir)
    print(f"== {repeats} repeats of 1 and 2 processes, comm-hook timing only", flush=True)
    run_repeats(out, repeats, steps, warmup, corpus_dir)
    manifest = write_report(out, command)
    print(f"manifest: {out / 'manifest.json'}; lesson_notes (Block G) is yours to write in notebook 06")
    return manifest


def write_report(out: Path, command: str) -> Manifest:
    """scaling.png and manifest.json from the 1- and 2-process runs in `out`; return the manifest.

    A copy of train.py goes next to the artifacts when `out` is not the experiment folder, so
    the folder names the script behind it.
    """
    out = Path(out).resolve()
    if out != TRAIN_SCRIPT.parent:
        shutil.copy2(TRAIN_SCRIPT, out / TRAIN_SCRIPT.name)
    manifest = build_manifest(out, command)
    plot_scaling(manifest, out / "scaling.png")
    manifest.write(out / "manifest.json")
    return manifest


def main(argv: list[str] | None = None) -> None:
    p = LabArgumentParser(description="Run the whole DDP-on-CPU experiment.")
    p.add_argument("--out", type=output_folder, default=EXPERIMENT_DIR)
    p.add_argument("--steps", type=positive_int, default=STEPS)
    p.add_argument("--warmup", type=nonnegative_int, default=WARMUP)
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--repeats", type=positive_int, default=REPEATS, help="runs of each process count (at least 1)")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    run_experiment(args.out, args.steps, args.warmup, args.corpus_dir, args.repeats,
                   " ".join(["python -m minitrain.lab.experiment", *argv]))


if __name__ == "__main__":
    main()
