"""Every TODO of the lab, declared once: where the learner writes it, its points, what grades it, what it needs, and
what the student edition leaves out with it. `make grade`, class grading, the student edition and the tests read it, and
a test holds README.md's and TEACHER.md's TODO tables to it; adding a TODO is one record here, its stub, its grader
and its cell."""

import importlib
from collections.abc import Callable
from dataclasses import dataclass

EXPERIMENT = "experiments/35-ddp-cpu"
RUN_FILES = ("timings.jsonl", "run.json", "manifest.json", "scaling.png", "state-rank-0.pt", "state-rank-1.pt")
RUN_FOLDERS = ("single-process", "repeats")
PARTS = {"sheet": "the sheet", "beyond": "exercises beyond it", "optional": "optional (notebooks 15 to 19)"}  # summed apart
EXERCISE_16 = "src/minitrain/diagnose/exercise"
GRADERS = "minitrain.lab.grading.graders"  # a record's `grader` is "module:function" in this package


@dataclass(frozen=True)
class Todo:
    """One TODO: its key (A, B1, ..., ex15), the file the learner writes it in and the stub there (the functions or
    classes holding its solution regions, or a notebook's solution cell by its nbgrader grade_id), its grader, the
    part of the lab it belongs to (a key of PARTS) and the TODOs its grader runs."""
    key: str
    file: str  # where the learner writes it, relative to the repository ("/" at the end: a folder)
    stub: tuple[str, ...]  # top-level functions or classes of `file`, or ("cell:<grade_id>",) in a notebook
    what: str  # make grade's row
    notebook: str  # the notebook that asks for it, as README's table shows it
    points: int
    grader: str  # "module:function" in GRADERS, called with (the graded tree's root, this Todo): the verdict
    graded_by: str  # how, in a sentence of TEACHER.md's table
    timeout_s: float
    part: str = "sheet"
    needs: tuple[str, ...] = ()  # graded first; one that does not pass blocks this one (its mistake costs once)
    teacher_files: tuple[str, ...] = ()  # left out of the student edition: its key, its grader's tests on near-answers
    starts_as: str = ""  # the file the student edition writes at `file` in place of the solution (a script to fix)

    @property
    def cell(self) -> str | None:
        """The grade_id of the notebook cell the learner writes it in, or None for a file's functions."""
        return self.stub[0].removeprefix("cell:") if self.stub and self.stub[0].startswith("cell:") else None

    @property
    def collected(self) -> tuple[str, ...]:
        """The learner's files class grading takes from a submission for it, relative to the repository."""
        if self.file.endswith("/"):
            return tuple(f"{self.file}{name}" for name in (*RUN_FILES, *RUN_FOLDERS))
        return (self.file,)

    def grader_function(self) -> Callable:
        """The function `grader` names."""
        module, function = self.grader.split(":")
        return getattr(importlib.import_module(f"{GRADERS}.{module}"), function)


_DIAGNOSIS = ("src/minitrain/lab/teaching/diagnosis_key.py", "tests/diagnose/test_diagnosis_grader.py")
_FIXES = ("tests/diagnose/test_fix_grader.py", "tests/diagnose/fix_mistakes.py")
TODOS = (
    Todo("A", "src/minitrain/ddp.py", ("init_distributed", "wrap_for_ddp", "is_main_process", "barrier", "cleanup"),
         "Block A: init_distributed, wrap_for_ddp, is_main_process, barrier, cleanup", "03", 3, "wrapper:grade_a",
         "`graders.grade_block_a` (which `tests/minitrain/test_ddp.py` runs): alone, and in a real 2-process gloo run",
         300),
    Todo("B1", "src/minitrain/data.py", ("make_shard",), "Block B: make_shard's split", "02", 1, "sharding:grade_b1",
         "`make_shard` on 7 small corpora, 1-4 ranks", 120),
    Todo("B2", "src/minitrain/data.py", ("check_shards",), "Block B: the counts check and the first-sentence log",
         "02", 1, "sharding:grade_b2", "a real 3-process gloo run", 120),
    Todo("C", f"{EXPERIMENT}/train.py", ("setup", "train_step"), "Block C: train.py's setup and train_step", "04", 3,
         "training:grade_c", "`graders.grade_train_script`: a real 2-process run of the learner's script (6 steps), "
         "held bit for bit to DDP's arithmetic done by hand in one process (`minitrain.lab.grading.by_hand`), each "
         "rank's seed and each step's span read from the run; then 2 steps with `--no-sync`, which must do no "
         "all-reduce", 300, needs=("A", "B1", "B2", "D"),  # the imports of train.py
         teacher_files=("tests/minitrain/test_train_grader.py", "tests/minitrain/learner.py")),
    Todo("D", "src/minitrain/timing.py", ("BarrierTimer",), "Block D: BarrierTimer (variant A: the barriers and the "
         "clock)", "04", 2, "timers:grade_d", "alone, then a real 2-process run with a late rank", 120),
    Todo("E", f"{EXPERIMENT}/compare_states.py", ("states_equivalent",), "Block E: states_equivalent", "05", 1,
         "states:grade_e", "pairs built to catch mistakes, then the learner's run", 120),
    Todo("F", f"{EXPERIMENT}/", (), "the learner's run: stop conditions 1-3 (files, equivalence, timing)", "04 to 06",
         2, "own_run:grade_f", "`python -m minitrain.lab.check` on the learner's folder", 120),
    Todo("G", "notebooks/06-scaling-and-report.ipynb", ("cell:lesson-notes",),
         "Block G: the paragraph (manifest lesson_notes)", "06", 2, "own_run:grade_g",
         "stop condition 4 (numbers, verdict, length), then the rubric", 120,
         teacher_files=("src/minitrain/lab/teaching/reference.py", "tests/minitrain/test_paragraph.py",
                        "tests/minitrain/paragraphs.json")),
    Todo("ex03", "notebooks/03-wrapping.ipynb", ("cell:rank1-holds-rank0-init",), "exercise: rank1_holds_rank0_init",
         "03", 1, "states:grade_ex03", "`graders.grade_rank1_holds_rank0_init`", 120, part="beyond"),
    Todo("ex04", "notebooks/04-launch-and-timing.ipynb", ("cell:my-timing-hook",),
         "exercise: my_timing_hook (variant B)", "04", 2, "timers:grade_ex04", "real gloo runs of 3 and 2 processes",
         180, part="beyond"),
    Todo("ex15", "src/minitrain/scratch_ddp.py", ("NaiveDDP", "OverlappedDDP", "BucketedDDP"),
         "exercise: NaiveDDP, OverlappedDDP, BucketedDDP (notebook 15)", "15", 3, "from_scratch:grade_ex15",
         "`graders.from_scratch.grade_scratch_ddp`: real gloo runs of 2 and 3 processes beside torch's DDP "
         "(bit for bit at 2)", 240, part="optional",
         teacher_files=("tests/minitrain/test_scratch_ddp.py", "tests/minitrain/scratch_mistakes.py")),
    *(Todo(f"ex16{s[-4]}", "notebooks/16-when-it-breaks.ipynb", ("cell:diagnose",),
           f"exercise: diagnose {s} (notebook 16)", "16", 1, "diagnosis:grade_ex16",
           "class grading only (the key, `minitrain.lab.teaching.diagnosis_key`, is not in the student edition): "
           f"`graders.diagnosis.grade_diagnosis`, a real 2-process run of `{s}` under one tool must show its "
           "fault, then each key is checked", 120, part="optional", teacher_files=_DIAGNOSIS)
      for s in ("run_a.py", "run_b.py", "run_c.py")),
    *(Todo(f"fix16{s[-4]}", f"{EXERCISE_16}/fixed/{s}", (), f"exercise: fix {s} (notebook 16)", "16", 1,
           "fixes:grade_fix", f"`graders.fixes.grade_fix`: the learner's fixed `{s}` runs to its end on 2 real ranks "
           "and trains as the broken script does in one process (steps, loss, weights within 1e-3), on its own data "
           "and on another seed's", 240, part="optional", teacher_files=_FIXES, starts_as=f"{EXERCISE_16}/{s}")
      for s in ("run_a.py", "run_b.py", "run_c.py")),
    Todo("ex17", "src/minitrain/ring.py", ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"),
         "exercise: ring_reduce_scatter, ring_all_gather, ring_all_reduce (notebook 17)", "17", 3, "ring:grade_ex17",
         "`graders.ring.grade_ring`: real gloo runs of 2, 3 and 4 processes, the built-in collectives made to raise, "
         "exact sums that name which ranks' shares a wrong chunk holds", 180, part="optional",
         teacher_files=("tests/ring/test_ring_grader.py",)),
    Todo("ex18", "src/minitrain/sharded_optimizer.py", ("ShardedOptimizer",),
         "exercise: ShardedOptimizer (notebook 18)", "18", 3, "sharded:grade_ex18",
         "`graders.sharded.grade_sharded`: real gloo runs of 2 and 3 processes with SGD and momentum, held to one "
         "process on the whole batch; each rank's stepped parameters and state bytes read, its gradients after "
         "average_gradients", 180, part="optional", teacher_files=("tests/sharded/test_sharded_grader.py", "tests/graded_edits.py")),
    Todo("ex19", "src/minitrain/fsdp.py", ("Unit", "shard_model", "after_backward"),
         "exercise: Unit, shard_model, after_backward (notebook 19)", "19", 3, "fsdp:grade_ex19",
         "`graders.fsdp.grade_fsdp`: real gloo runs of 2 and 3 processes with SGD and momentum, held to one process "
         "on the whole batch; what the units hold after construction, forward, after_backward and the step read on "
         "each rank", 180, part="optional", teacher_files=("tests/fsdp/test_fsdp_grader.py", "tests/graded_edits.py")),
)
BY_KEY = {t.key: t for t in TODOS}
TODO_FILES = sorted({t.file for t in TODOS if not t.file.endswith("/")})
TEACHER_FILES = sorted({f for t in TODOS for f in t.teacher_files})
