"""Block C's grader: real 2-process runs of the learner's train.py, the whole script run as __main__ in each rank
(spawn_workers; the ranks forked warm). After the graded run both ranks must hold, bit for bit, the weights of DDP's
arithmetic done by hand in one process (minitrain.lab.grading.by_hand); each rank seeded by the sheet's rule, each
step timed whole, in milliseconds; a run with --no-sync must do no all-reduce."""

import json
import re
import tempfile
from pathlib import Path

from minitrain.corpus import DEFAULT_CORPUS_DIR
from minitrain.data import SEED_BASE
from minitrain.lab.grading.by_hand import judge_run
from minitrain.lab.grading.graders.learner import corpus
from minitrain.hang_report import named_hang
from minitrain.lab.grading.graders.running import RUN_LIMIT_S, ExerciseError, rank_logs, script_rank
from minitrain.lab.reporting.stop_conditions import CheckFailed, validated_timings
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.timing import BY_NAME
from minitrain.todo import NotDone
from minitrain.train import TrainConfig
from minitrain.verify import StateFileError, compare_state_files, load_state

STEPS, WARMUP = 6, 2  # a few steps: by hand they take one process a few seconds
NO_SYNC_STEPS = 2
WORLD_SIZE = 2
RANK_ERROR = re.compile(r"\s*[\w.]*(?:Error|Exception)\b.*: ")  # "AttributeError: 'str' object ..."
SPAN_SLACK_MS = 0.05  # step_ms may exceed forward + backward + optimizer by clock reads, never fall short of it


def _rank_error(output: list[str]) -> str | None:
    """The first exception a rank raised (its traceback's last line)."""
    found = [line.strip() for line in output if RANK_ERROR.match(line)]
    return re.sub(r"^minitrain\.script\.", "", found[0]) if found else None


def _run(script: Path, out: Path, corpus_dir: Path, steps: int, *extra: str) -> None:
    """train.py for `steps` steps in 2 processes, into `out`; a failure named."""
    argv = ["--steps", str(steps), "--warmup", str(min(WARMUP, steps - 1)), "--corpus-dir", str(corpus_dir),
            "--out", str(out), *extra]
    logs = out.parent / f"{out.name}-logs"
    logs.mkdir(parents=True)
    try:
        # one thread a rank, as torchrun gives 2 processes when OMP_NUM_THREADS is unset: by_hand's sums are
        # cut for one thread, and a learner's shell may set more
        spawn_workers(script_rank, WORLD_SIZE, str(logs), str(script), argv, start_method=fast_start_method(),
                      timeout_s=RUN_LIMIT_S, env={"OMP_NUM_THREADS": "1"})
    except TimeoutError as e:
        raise ExerciseError(f"train.py's 2-process run did not end within {RUN_LIMIT_S:g} s and was stopped: "
                            f"{named_hang(rank_logs(logs)) or 'a rank waited for ever'}") from e
    except Exception as e:  # a rank raised or exited non-zero (mp's ProcessRaisedException, ProcessExitedException)
        output = str(e).splitlines()
        if (what := blank.in_output(str(e))) is not None:
            raise NotDone(what) from e
        why = _rank_error(output) or output[-1]
        if "cuda" in why.lower():  # a GPU tutorial's habit: torch.cuda.synchronize(), .cuda(), .to(rank)
            why = f"the lab runs on CPUs, drop the CUDA call ({why})"
        raise ExerciseError(f"train.py's 2-process run{' with ' + ' '.join(extra) if extra else ''} failed: "
                            f"{why}") from e


def _seeds(out: Path) -> str | None:
    """The seed rule as each rank ran it (run.json's ranks: torch.initial_seed()), or the mistake."""
    seeds = [rank.get("seed") for rank in json.loads((out / "run.json").read_text())["ranks"]]
    wanted = [SEED_BASE + rank for rank in range(WORLD_SIZE)]
    if seeds == wanted:
        return None
    if len(set(seeds)) == 1:
        return (f"both ranks ran with seed {seeds[0]}: seed each rank with args.seed + rank ({', '.join(map(str, wanted))}: "
                "the sheet's 35000 + rank), so that each rank shuffles its shard its own way (make_shard's seed) and builds "
                "its own initial model (the broadcast makes it rank 0's)")
    return (f"the ranks ran with seeds {seeds} (torch.initial_seed()), not {wanted}: seed_everything(args.seed + rank) "
            "in setup(), after init_distributed() gives the rank")


def _timing(records: list[dict]) -> str | None:
    """Each record's step_ms spans forward, backward and optimizer, in milliseconds; tokens are every rank's."""
    for r in records:
        parts = r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"]
        if r["step_ms"] < parts - SPAN_SLACK_MS:
            return (f"step {r['step']}: step_ms is {r['step_ms']:.2f} but forward_ms + backward_ms + optimizer_ms is "
                    f"{parts:.2f}: step_ms must span the whole step, from before next(shard) to after zero_grad "
                    "(the headline tokens/s divides by it)")
    if all(r["step_ms"] < 1.0 for r in records):
        return (f"every step_ms is under 1 ({max(r['step_ms'] for r in records):.3g}): these look like seconds; "
                "record milliseconds, (t1 - t0) * 1e3")
    tokens = TrainConfig.batch_size * TrainConfig.block_size * WORLD_SIZE
    if any(r["tokens"] != tokens for r in records):
        return (f"a record counts {records[0]['tokens']} tokens, not {tokens} (batch_size x block_size x world_size): "
                "a step trains on every rank's batch: setup() must return the world_size init_distributed() gave")
    if all(r.get(BY_NAME["barrier"].field) is None for r in records):
        return ("no timer measured backward: call timed_backward(loss, timers) in place of loss.backward() in "
                "train_step (it puts Block D's timer around the backward)")
    if all(r.get(BY_NAME["hook"].field) is None for r in records):
        return ("no all-reduce ran in any step: train_step's forward must go through the model setup() returned "
                "(model(batch)), not the model inside it (model.module), and outside no_sync unless its `no_sync` argument is "
                "True, or DDP never averages the gradients")
    return None


def _no_sync_obeyed(script: Path, out: Path, corpus_dir: Path) -> str | None:
    """With --no-sync, train_step must do no all-reduce (notebook 09's control): the mistake, or None."""
    _run(script, out, corpus_dir, NO_SYNC_STEPS, "--no-sync")
    records = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    if any(r.get(BY_NAME["hook"].field) is not None for r in records):
        return ("with --no-sync an all-reduce still ran: put the forward and the backward inside "
                "`with controls.maybe_no_sync(model, no_sync):` in train_step (DDP decides in forward)")
    return None


def grade_train_script(script: Path, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> str:
    """Run `script` (train.py) for STEPS steps in 2 processes, then for NO_SYNC_STEPS
    with --no-sync; one PASS line, or an ExerciseError naming the first mistake."""
    with tempfile.TemporaryDirectory(prefix="minitrain-grade-") as tmp:
        out = Path(tmp) / "run"
        _run(script, out, corpus_dir, STEPS)
        try:
            comparison = compare_state_files(out / "state-rank-0.pt", out / "state-rank-1.pt")
            states = [load_state(out / f"state-rank-{rank}.pt") for rank in (0, 1)]
            records = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
        except (StateFileError, OSError, json.JSONDecodeError) as e:
            raise ExerciseError(f"after train.py's 2-process run: {e}") from e
        if len(records) != STEPS:
            raise ExerciseError(f"train.py --steps {STEPS} wrote {len(records)} lines to timings.jsonl: one per step")
        if mistake := _seeds(out) or _timing(records):
            raise ExerciseError(f"after train.py's {STEPS}-step 2-process run: {mistake}")
        try:
            validated_timings(out / "timings.jsonl")
        except CheckFailed as e:
            raise ExerciseError(f"after train.py's 2-process run: {e}") from e
        if mistake := judge_run(states, STEPS, corpus_dir):
            raise ExerciseError(f"after train.py's {STEPS}-step 2-process run {mistake} (largest |rank 0 - rank 1| "
                                f"{comparison.max_abs_diff:.1e})")
        if mistake := _no_sync_obeyed(script, Path(tmp) / "no-sync", corpus_dir):
            raise ExerciseError(mistake)
    return (f"Block C: correct. A real 2-process run of train.py ({STEPS} steps): both ranks' final weights are, "
            "bit for bit, those of DDP's arithmetic done by hand in one process (minitrain.lab.grading.by_hand); the "
            f"ranks ran with seeds {SEED_BASE} and {SEED_BASE + 1}; each step_ms spans the whole step, in ms; and "
            f"a run with --no-sync did no all-reduce")


def grade_c(repo: Path, todo: Todo) -> str:
    """Block C: the graded tree's train.py, run for real."""
    return grade_train_script(repo / todo.file, corpus(repo))
