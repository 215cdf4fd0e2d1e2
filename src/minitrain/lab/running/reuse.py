"""Which of the runs already in the output folder `make lab` reuses: a complete run (every file the lab reads
written, nothing left staged) of the configuration it would measure. Anything else is measured again, and
the lab says why; so a paragraph written from the runs in notebook 06 still matches them after `make lab`."""

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.lab.reporting.disturbance import disturbance
from minitrain.lab.reporting.runs import REPEATS_DIR, read_repeats, repeat_dir, run_dir_in, throughput
from minitrain.model import MiniGPTConfig
from minitrain.provenance import file_sha256
from minitrain.run_record import RunRecord, RunRecordError
from minitrain.timing import BY_NAME
from minitrain.train import TrainConfig

SHEET_TIMING = list(BY_NAME)  # the sheet's runs time the all-reduce both ways (train.py's default)
REPEAT_TIMING = ["hook"]  # the repeats, the comm hook only (minitrain.lab.running.alternating_repeats)


def _corpus_sha256() -> str:
    """The hash of the corpus the lab's runs read, generated first if it is not there yet (as run.ipynb would:
    it is the same text on every machine, so a run made on another clone can still be reused)."""
    return file_sha256(ensure_corpus(DEFAULT_CORPUS_DIR) / "train.jsonl")


def run_problem(folder: Path, nproc: int, steps: int, warmup: int, timing: list[str], states: bool) -> str | None:
    """Why the run in `folder` cannot be reused, None when it can. `states`: its weights are read too (the
    sheet's runs; the repeats' weights are git-ignored and unread)."""
    folder = Path(folder)
    if not (folder / "run.json").is_file():
        return "missing"
    staging = folder / f".staging-{nproc}proc"
    if staging.exists():  # train.py removes it once every rank's files are in place
        return f"incomplete: {staging.name}/ is left by a run that did not finish moving its files"
    try:
        run = RunRecord.read(folder / "run.json")
    except RunRecordError as e:
        return f"unreadable: {e}"
    needed = ["timings.jsonl", *(f"state-rank-{r}.pt" for r in range(nproc) if states)]
    if missing := [name for name in needed if not (folder / name).is_file() or (folder / name).stat().st_size == 0]:
        return f"incomplete: {', '.join(missing)} missing or empty"
    if (lines := len((folder / "timings.jsonl").read_text().splitlines())) != run.steps:
        return f"incomplete: timings.jsonl holds {lines} steps, run.json says {run.steps}"
    wanted = {"world_size": nproc, "steps": steps, "warmup_steps": warmup, "timing": timing, "launcher": "torchrun",
              "batch_size_per_rank": TrainConfig.batch_size, "block_size": TrainConfig.block_size, "lr": TrainConfig.lr,
              "model_config": {k: getattr(MiniGPTConfig, k) for k in ("n_layer", "n_head", "n_embd")},
              "comm": "allreduce", "no_sync": False, "restart": None, "torch": torch.__version__,
              "corpus_sha256": _corpus_sha256()}
    if differs := [f"{key} {getattr(run, key)!r}, not {value!r}" for key, value in wanted.items()
                   if getattr(run, key) != value]:
        return f"another configuration: {'; '.join(differs)}"
    return None


def repeats_problem(out: Path, repeats: int, steps: int, warmup: int) -> str | None:
    """Why the repeats in `out` cannot be reused as a set (they alternate 1, 2, 1, 2: one bad, all again)."""
    for repeat in range(repeats):
        for nproc in (1, 2):
            if problem := run_problem(repeat_dir(out, repeat, nproc), nproc, steps, warmup, REPEAT_TIMING, False):
                return f"r{repeat}-{nproc}proc {problem}"
    if extra := stale_repeats(out, repeats):
        return f"{len(extra)} repeat folder(s) beyond the {repeats} of each asked for: {', '.join(p.name for p in extra)}"
    return None


def stale_repeats(out: Path, repeats: int) -> list[Path]:
    """Repeat folders beyond the `repeats` asked for: the manifest would count them."""
    kept = {repeat_dir(out, r, n).name for r in range(repeats) for n in (1, 2)}
    return sorted(p for p in (Path(out) / REPEATS_DIR).glob("r*-*proc") if p.name not in kept)


def remove_stale_repeats(out: Path, repeats: int) -> None:
    """Before the repeats are measured again: remove those beyond the count, which no run would overwrite."""
    for folder in stale_repeats(out, repeats):
        shutil.rmtree(folder)


@dataclass(frozen=True)
class Plan:
    """What make lab measures: each part with why (None: reused as it is)."""

    sheet: dict[int, str | None]  # the sheet's 1- and 2-process runs
    repeats: str | None

    @property
    def nothing_to_measure(self) -> bool:
        return self.repeats is None and all(why is None for why in self.sheet.values())

    def lines(self, out: Path, repeats: int) -> list[str]:
        """One line a part: reused, or to measure and why; a note when reused repeats look disturbed."""
        parts = [(f"the sheet's {n}-process run", why) for n, why in self.sheet.items()]
        parts.append((f"the repeats ({repeats} of each)", self.repeats))
        said = [f"  {what}: " + ("reused, complete and of this configuration" if why is None else f"to measure ({why})")
                for what, why in parts]
        if self.repeats is None and (reasons := reused_disturbance(out)):
            said.append(f"  the reused repeats look disturbed ({'; '.join(reasons)}): on a quiet machine, "
                        "--remeasure measures them again")
        return said


def plan_runs(out: Path, steps: int, warmup: int, repeats: int, remeasure: bool) -> Plan:
    """Which runs to measure in `out`: all with `remeasure`, else those missing, incomplete or of another
    configuration."""
    if remeasure:
        return Plan({1: "--remeasure", 2: "--remeasure"}, "--remeasure")
    return Plan({n: run_problem(run_dir_in(out, n), n, steps, warmup, SHEET_TIMING, True) for n in (1, 2)},
                repeats_problem(out, repeats, steps, warmup))


def reused_disturbance(out: Path) -> list[str]:
    """The disturbance of the repeats in `out` (minitrain.lab.reporting.disturbance), read from their run.json."""
    found = read_repeats(out)
    threads = {n: runs[0].threads_per_rank for n, runs in found.items() if runs}
    if len(threads) < 2:
        return []
    return disturbance(*([throughput(r) for r in found[n]] for n in (1, 2)), threads[1], threads[2])
