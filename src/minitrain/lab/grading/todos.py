"""The learner's TODOs: where each is written, its points, what grades it, what it needs; and the learner's files."""

from dataclasses import dataclass

EXPERIMENT = "experiments/35-ddp-cpu"
RUN_FILES = ("timings.jsonl", "run.json", "manifest.json", "scaling.png", "state-rank-0.pt", "state-rank-1.pt")
RUN_FOLDERS = ("single-process", "repeats")
PARTS = {"sheet": "the sheet", "beyond": "exercises beyond it", "optional": "optional (notebooks 15 and 16)"}  # summed apart


@dataclass(frozen=True)
class Todo:
    """One TODO of the lab: its key (A, B1, ..., ex15), the file the learner writes it in, its grading, the part
    of the lab it belongs to (a key of PARTS) and the TODOs its grader runs."""
    key: str
    file: str  # where the learner writes it, relative to the repository
    what: str
    points: int
    graded_by: str
    timeout_s: float
    part: str = "sheet"
    needs: tuple[str, ...] = ()  # graded first; one that does not pass blocks this one (its mistake costs once)


TODOS = (
    Todo("A", "src/minitrain/ddp.py", "Block A: init_distributed, wrap_for_ddp, is_main_process, barrier, cleanup", 3,
         "graders.grade_block_a: without a process group and in a real 2-process gloo run (test_ddp.py calls it)", 300),
    Todo("B1", "src/minitrain/data.py", "Block B: make_shard's split", 1,
         "graders.grade_make_shard: make_shard on 7 small corpora, 1-4 ranks", 120),
    Todo("B2", "src/minitrain/data.py", "Block B: the counts check and the first-sentence log", 1,
         "graders.grade_check_shards: check_shards in a real 3-process gloo run", 120),
    Todo("C", f"{EXPERIMENT}/train.py", "Block C: train.py's setup and train_step", 3,
         "graders.grade_train_script: a real 2-process run of the learner's train.py (6 steps), both ranks bit for bit "
         "DDP's arithmetic by hand (lab.by_hand), each rank's seed, each step_ms's span; then 2 steps with --no-sync",
         300, needs=("A", "B1", "B2", "D")),  # the imports of train.py
    Todo("D", "src/minitrain/timing.py", "Block D: BarrierTimer (variant A: the barriers and the clock)", 2,
         "graders.grade_barrier_timer: alone and in a real 2-process gloo run", 120),
    Todo("E", f"{EXPERIMENT}/compare_states.py", "Block E: states_equivalent", 1,
         "graders.grade_states_equivalent on the script's function (and the learner's run)", 120),
    Todo("F", f"{EXPERIMENT}/", "the learner's run: stop conditions 1-3 (files, equivalence, timing)", 2,
         "python -m minitrain.lab.check on the learner's experiment folder", 120),
    Todo("G", "notebooks/06-scaling-and-report.ipynb", "Block G: the paragraph (manifest lesson_notes)", 2,
         "stop condition 4 on the learner's manifest", 120),
    Todo("ex03", "notebooks/03-wrapping.ipynb", "exercise: rank1_holds_rank0_init", 1,
         "graders.grade_rank1_holds_rank0_init", 120, part="beyond"),
    Todo("ex04", "notebooks/04-launch-and-timing.ipynb", "exercise: my_timing_hook (variant B)", 2,
         "graders.grade_timing_hook: real gloo runs of 3 and 2 processes", 180, part="beyond"),
    Todo("ex15", "src/minitrain/scratch_ddp.py", "exercise: NaiveDDP, OverlappedDDP, BucketedDDP (notebook 15)", 3,
         "scratch_graders.grade_scratch_ddp: real gloo runs of 2 and 3 processes beside torch's DDP", 240,
         part="optional"),
    *(Todo(f"ex16{s[-4]}", "notebooks/16-when-it-breaks.ipynb", f"exercise: diagnose {s} (notebook 16)", 1,
           f"graders.diagnosis.grade_diagnosis: a real 2-process run of {s} shows its fault; each key checked", 120,
           part="optional") for s in ("run_a.py", "run_b.py", "run_c.py")),
)
BY_KEY = {t.key: t for t in TODOS}
EXERCISES = {"ex03": "rank1-holds-rank0-init", "ex04": "my-timing-hook",  # key -> the solution cell's grade_id
             "ex16a": "diagnose", "ex16b": "diagnose", "ex16c": "diagnose"}
TODO_FILES = sorted({t.file for t in TODOS if not t.file.endswith("/")})
