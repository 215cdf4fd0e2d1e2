"""One command for the whole experiment: corpus, 1- and 2-process runs, comparison, plot, manifest.

    python -m minitrain.lab.experiment [--out DIR] [--steps 100] [--warmup 50]
"""

import argparse
import shutil
import sys
from pathlib import Path

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.report import build_manifest, plot_scaling, write_manifest
from minitrain.lab.runs import SINGLE_DIR
from minitrain.launch import run_streaming, torchrun_command
from minitrain.paths import EXPERIMENT_DIR, TRAIN_SCRIPT


def run_training(nproc: int, out: Path, steps: int, warmup: int, corpus_dir: Path,
                 timeout: float | None = None) -> None:
    """One real run of train.py under torchrun with `nproc` processes, streamed to stdout."""
    run_streaming(torchrun_command(TRAIN_SCRIPT, nproc, "--out", str(out), "--steps", str(steps),
                                   "--warmup", str(warmup), "--corpus-dir", str(corpus_dir)),
                  timeout=timeout)


def run_experiment(out: Path = EXPERIMENT_DIR, steps: int = 100, warmup: int = 50,
                   corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict:
    """Run everything into `out` and return the manifest."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ensure_corpus(corpus_dir)
    for nproc, folder in ((1, out / SINGLE_DIR), (2, out)):
        print(f"== {nproc}-process run -> {folder}", flush=True)
        run_training(nproc, folder, steps, warmup, corpus_dir)
    manifest = write_report(out, " ".join(["python -m minitrain.lab.experiment", *sys.argv[1:]]))
    print(manifest["lesson_notes"])
    return manifest


def write_report(out: Path, command: str) -> dict:
    """scaling.png and manifest.json from the 1- and 2-process runs in `out`; return the manifest.

    A copy of train.py goes next to the artifacts when `out` is not the experiment folder, so
    the folder names the script behind it.
    """
    out = Path(out).resolve()
    if out != TRAIN_SCRIPT.parent:
        shutil.copy2(TRAIN_SCRIPT, out / TRAIN_SCRIPT.name)
    plot_scaling(out, out / "scaling.png")
    manifest = build_manifest(out, command)
    write_manifest(manifest, out / "manifest.json")
    return manifest


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Run the whole DDP-on-CPU experiment.")
    p.add_argument("--out", type=Path, default=EXPERIMENT_DIR)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    run_experiment(args.out, args.steps, args.warmup, args.corpus_dir)


if __name__ == "__main__":
    main()
