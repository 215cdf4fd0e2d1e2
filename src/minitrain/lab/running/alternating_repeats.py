"""The repeats of the 1-vs-2 comparison: two torchrun jobs that stay up and take turns.

    python -m minitrain.lab.repeats [--out DIR] [--repeats 3] [--steps 100] [--warmup 50]

One job has 1 rank, the other 2, each started once (a start costs seconds of imports, rendezvous
and corpus loading, more than a repeat's steps), both started up before the first repeat. They
alternate 1, 2, 1, 2, ...: the driver writes a turn file, the job whose turn it is runs one repeat
while the other sleeps, and a done file hands the turn back; the 1-process job has exited before the
2-process job's last turn, so no measured step overlaps another job's work. A repeat is train.py's run
timed by the comm hook only (`--timing hook`): the same setup, seeds and step (minitrain.rank),
and the same files, in repeats/r{i}-{n}proc/.
"""

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

from minitrain.cli import LabArgumentParser, nonnegative_int, output_folder, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import check_shards, load_corpus
from minitrain.ddp import cleanup, init_distributed, unwrap
from minitrain.lab.reporting.runs import REPEATS_DIR, repeat_dir
from minitrain.launch import LaunchError
from minitrain.launch.warm import Job, start_ranks, stop_ranks
from minitrain.model import MiniGPTConfig
from minitrain.paths import EXPERIMENT_DIR, relative
from minitrain.rank import DDPRank
from minitrain.run_record import write_run_files
from minitrain.train import TrainConfig

TURNS = ".turns"  # in repeats/: the turn files and the jobs' logs, removed at the end
POLL_S = 0.02  # how often a waiting job looks for its turn (a sleeping process, no CPU to speak of)


def _turn(turns: Path, repeat: int, nproc: int, what: str) -> Path:
    return turns / f"{what}-r{repeat}-{nproc}proc"


def run_repeats(out: Path, repeats: int, steps: int, warmup: int, corpus_dir: Path = DEFAULT_CORPUS_DIR,
                timeout: float | None = None, before_turns: Callable[[], None] = lambda: None) -> None:
    """`repeats` repeats of 1 and of 2 processes, alternating 1, 2, 1, 2, ..., into `out`/repeats/.
    `before_turns` runs while the jobs start up and must end what else runs (the first turn waits for it).
    A job that fails or a turn that outlasts `timeout` stops both jobs and raises LaunchError."""
    out, corpus_dir = Path(out).resolve(), Path(corpus_dir).resolve()
    ensure_corpus(corpus_dir)
    load_corpus(corpus_dir / "train.jsonl")  # a broken corpus: CorpusError here, naming the fix, before any start
    turns = out / REPEATS_DIR / TURNS
    turns.mkdir(parents=True, exist_ok=True)
    for stale in turns.iterdir():
        stale.unlink()
    record = f"python -m minitrain.lab.repeats --out {relative(out)} --repeats {repeats} --steps {steps} --warmup {warmup}"
    jobs = {}
    try:
        for nproc in (1, 2):
            jobs[nproc] = start_ranks("minitrain.lab.repeats", nproc, "--worker", "--out", str(out), "--repeats",
                                      str(repeats), "--steps", str(steps), "--warmup", str(warmup), "--corpus-dir",
                                      str(corpus_dir), "--record-command", record, module=True,
                                      log=turns / f"job-{nproc}proc.log")
        before_turns()
        for nproc in (1, 2):  # both started (imports, rendezvous, corpus) before any measured step
            _wait_for(_turn(turns, 0, nproc, "ready"), nproc, jobs, turns, timeout)
        for repeat in range(repeats):
            for nproc in (1, 2):
                if (repeat, nproc) == (repeats - 1, 2):  # the 1-process job's exit (cleanup, torchrun's) before the last turn
                    _exited(jobs[1], 1, turns)
                start = time.perf_counter()
                _turn(turns, repeat, nproc, "go").touch()
                _wait_for(_turn(turns, repeat, nproc, "done"), nproc, jobs, turns, timeout)
                print(f"repeat {repeat + 1}/{repeats}, {nproc} process(es): {time.perf_counter() - start:.1f} s",
                      flush=True)
        _exited(jobs[2], 2, turns)
    finally:
        for job in jobs.values():
            if job.poll() is None:
                stop_ranks(job)
    for path in turns.iterdir():
        path.unlink()
    turns.rmdir()


def _wait_for(done: Path, turn: int, jobs: dict[int, Job], turns: Path, timeout: float | None) -> None:
    """Until `done` exists; a job that failed, or the job whose turn it is ending without it, raises."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not done.exists():
        for nproc, job in jobs.items():
            if job.poll() is not None and (job.returncode != 0 or nproc == turn) and not done.exists():
                raise LaunchError(f"the {nproc}-process repeats job exited with status {job.returncode} before "
                                  f"{done.name}:\n" + _tail(turns / f"job-{nproc}proc.log"))
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{done.name} did not come within {timeout} s; both repeats jobs were stopped")
        time.sleep(POLL_S)


def _exited(job: Job, nproc: int, turns: Path) -> None:
    """Until the job, its turns done, has exited; LaunchError naming its log's tail when it failed."""
    if job.wait(timeout=60) != 0:
        raise LaunchError(f"the {nproc}-process repeats job exited with status {job.returncode}:\n"
                          + _tail(turns / f"job-{nproc}proc.log"))


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text().splitlines()[-lines:]) if log.is_file() else ""


def worker(args: argparse.Namespace) -> None:
    """One rank of one job: wait for each of its turns, run the repeat, hand the turn back."""
    rank, world_size = init_distributed("gloo")
    os.environ["MINITRAIN_LAUNCH_COMMAND"] = args.record_command  # run.json's command: how to repeat it
    turns = args.out / REPEATS_DIR / TURNS
    total = len(load_corpus(args.corpus_dir / "train.jsonl"))
    import torch._dynamo  # noqa: F401  what DistributedDataParallel() imports first: a second, in the start-up, not a turn
    dist.barrier()
    if rank == 0:
        _turn(turns, 0, world_size, "ready").touch()
    run_args = argparse.Namespace(  # what train.py --timing hook would record
        launcher="torchrun", timing=["hook"], steps=args.steps, warmup=args.warmup, corpus_dir=args.corpus_dir,
        batch_size=TrainConfig.batch_size, block_size=TrainConfig.block_size, lr=TrainConfig.lr,
        n_layer=MiniGPTConfig.n_layer, n_head=MiniGPTConfig.n_head, n_embd=MiniGPTConfig.n_embd,
        comm="allreduce", no_sync=False)
    for repeat in range(args.repeats):
        go = _turn(turns, repeat, world_size, "go")
        while not go.exists():
            time.sleep(POLL_S)
        dist.barrier()  # every rank of the job starts the repeat together
        run = DDPRank(rank, world_size, args.corpus_dir)
        shards = check_shards(run.shard, rank, world_size, total)
        records = []
        for step in range(args.steps):
            s = run.step()
            records.append({"step": step, "loss": s.loss, "step_ms": s.step_ms, "forward_ms": s.forward_ms,
                            "backward_ms": s.backward_ms, "optimizer_ms": s.optimizer_ms,
                            "tokens": run.tokens_per_step, "backward_allreduce_ms": None,
                            "allreduce_ms": s.allreduce_ms})
        run_args.out = repeat_dir(args.out, repeat, world_size)
        run_args.out.mkdir(parents=True, exist_ok=True)
        write_run_files(run_args, unwrap(run.ddp), records, run.hook, shards, None)
        if rank == 0:
            _turn(turns, repeat, world_size, "done").touch()
    cleanup()


def main(argv: list[str] | None = None) -> None:
    p = LabArgumentParser(description="The repeats of the 1-vs-2 comparison, alternating 1, 2, 1, 2, ...")
    p.add_argument("--out", type=output_folder, default=EXPERIMENT_DIR)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--warmup", type=nonnegative_int, default=50)
    p.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--record-command", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    if args.worker:
        worker(args)
    else:
        run_repeats(args.out, args.repeats, args.steps, args.warmup, args.corpus_dir)


if __name__ == "__main__":
    sys.exit(main())
