"""Grade the learner's TODOs: each in a process of its own with a timeout, by the real tests and graders.

    python -m minitrain.lab.grade [REPO]            # one tree (default: this one); `make grade`
    python -m minitrain.lab.grade --class FOLDER    # every submission in FOLDER: a table and FOLDER/grades.csv

Each TODO of the registry (minitrain.lab.todos.registry) is graded by its grader, in this module's `--todo KEY REPO`
mode: a child forked from a process that imported torch once (minitrain.lab.grading.forkserver, one for every tree
this process grades), REPO/src first on PYTHONPATH, its tree stopped at the timeout:
PASS, FAIL (the mistake named: ExerciseError), "not done" (a stub still raises NotDone), "hangs", or "teacher" (ex16a-c
where the teacher's key is not: the student edition). A row whose `needs` did not all pass is not run: "blocked",
naming them; in class grading it is graded with the reference's files of the TODOs it needs, and says so, and a
"teacher" row's answer (the child's result carries it) is checked against the key here, in the reference's process.
The points are summed apart for each part of the lab (PARTS: the sheet, the exercises beyond it, the optional one). A
submission is a student tree, or any folder holding its notebooks: only the learner's files (what each TODO of the
registry collects, the notebooks) go into a fresh student tree: its own graders and tests never run, no key is there.
"""

import argparse
import atexit
import csv
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from minitrain.cli import LabArgumentParser, positive_float, positive_int
from minitrain.hang_report import named_hang
from minitrain.lab.grading.forkserver import Forkserver
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import BY_KEY, PARTS, TODOS, Todo
from minitrain.parent_watch import WATCH_PID
from minitrain.paths import DEFAULT_CORPUS_DIR, EDITION_MARK, REPO, relative

RESULT = "grade-result: "  # the child's last line: this, then {"status": ..., "detail": ...}
SHORT = 72  # characters of a prerequisite's verdict in the row it blocks: one line, never a launcher's log
BY_TEACHER = "teacher"  # the status of a row graded only in class grading (its key is not in the student edition)
GRADERS_COLLECTIVE_TIMEOUT_S = 20  # a grader's tiny run waits a second at most in a collective: a hang named this soon


@dataclass
class Grade:
    todo: Todo
    status: str  # PASS, FAIL, not done, hangs, blocked (a TODO in todo.needs did not pass: not run), teacher
    detail: str
    seconds: float = 0.0
    blocked_by: tuple["Grade", ...] = ()
    stand_ins: tuple["Grade", ...] = ()  # the needed TODOs that failed, graded with the reference's files in place
    answer: object = None  # a "teacher" row's answer (the learner's diagnosis), for the key in class grading

    @property
    def points(self) -> int:
        return self.todo.points if self.status == "PASS" else 0

    @property
    def started(self) -> bool:
        """Whether grading saw the learner's work here: not "not done", nor blocked only by TODOs not started."""
        if self.status == "blocked":
            return any(g.started for g in self.blocked_by)
        return self.status != "not done"


def grade_todo(repo: Path, key: str, answer: dict | None = None) -> tuple[str, str]:
    """(status, detail) of one TODO, graded in this process by the registry's grader whatever it needs (grade_repo
    blocks it first); a "teacher" row's answer goes in `answer["answer"]`."""
    from minitrain.lab.grading.graders import ExerciseError
    from minitrain.lab.grading.graders.diagnosis import ByTeacher
    todo = BY_KEY[key]
    try:
        return "PASS", todo.grader_function()(repo, todo)
    except ExerciseError as e:
        return "FAIL", str(e)
    except ByTeacher as e:
        if answer is not None:
            answer["answer"] = e.answer
        return BY_TEACHER, str(e)
    except NotImplementedError as e:  # a stub's NotDone, or the learner's own NotImplementedError
        return "not done", blank.said(blank.what(e) or str(e))
    except Exception as e:  # the learner's code crashed where no grader expected it: still a row
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        what = blank.in_output(last)  # a blank quoted in its message
        return ("not done", blank.said(what)) if what is not None else ("FAIL", f"crashed: {last}")


def _child(repo: Path, key: str) -> int:
    """`--todo KEY REPO`: grade one TODO, print its result as the last line."""
    import minitrain
    os.chdir(repo)
    if Path(minitrain.__file__).resolve().parents[1] != (repo / "src").resolve():
        status, detail = "FAIL", f"imported minitrain from {minitrain.__file__}, not {repo / 'src'}"
    else:
        status, detail = grade_todo(repo, key, answer := {})
    print(RESULT + json.dumps({"status": status, "detail": detail, **answer}, default=repr), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------
# The parent: one child per TODO, a table, a class


def run_todo(repo: Path, todo: Todo, timeout_s: float | None = None, env: dict[str, str] | None = None) -> Grade:
    """One TODO of `repo` graded in a process of its own (a child of the shared server, `repo`'s environment:
    _tree_env); a child that outlives the timeout is stopped (its whole process tree) and graded "hangs", as is one
    whose rank reported a hang: "hangs at FILE:LINE on rank R (waits in COLLECTIVE)"."""
    timeout_s = todo.timeout_s if timeout_s is None else timeout_s
    output: list[str] = []
    start = time.monotonic()
    try:
        shared_server().run("minitrain.lab.grade", ["--todo", todo.key, str(repo)], timeout_s, output.append,
                            _tree_env(repo, env), repo)
    except TimeoutError:
        return Grade(todo, "hangs", named_hang("\n".join(output))
                     or f"no result within {timeout_s:g} s: its processes were stopped", time.monotonic() - start)
    seconds = time.monotonic() - start
    results = [line for line in output if line.startswith(RESULT)]
    hang = named_hang("\n".join(output))  # a rank's own report (hang_report), in its output or a grader's detail
    if hang:
        return Grade(todo, "hangs", hang, seconds)
    if not results:
        tail = " | ".join(line for line in output[-3:] if line.strip())
        return Grade(todo, "FAIL", f"the grader's process ended without a result: {tail}", seconds)
    result = json.loads(results[-1][len(RESULT):])
    return Grade(todo, result["status"], result["detail"], seconds, answer=result.get("answer"))


def graded_by_key(grade: Grade) -> Grade:
    """A "teacher" row of notebook 16's exercise graded here, with the key (class grading, from the reference): the
    learner's answer, which their process sent back, checked after a real run shows the script's fault."""
    from minitrain.lab.grading.graders import ExerciseError
    from minitrain.lab.grading.graders.diagnosis import graded_by_key as check
    start = time.monotonic()
    try:
        status, detail = "PASS", check({f"run_{grade.todo.key[-1]}.py": grade.answer})
    except (ExerciseError, RuntimeError) as e:  # a wrong key; the script no longer shows its fault
        status, detail = "FAIL", str(e)
    return Grade(grade.todo, status, detail, grade.seconds + time.monotonic() - start)


def run_graded(repo: Path, todo: Todo, timeout_s: float | None, env: dict[str, str] | None, by_key: bool) -> Grade:
    """run_todo, then, `by_key` (class grading, the key at hand), a "teacher" row graded with the key here."""
    grade = run_todo(repo, todo, timeout_s, env)
    return graded_by_key(grade) if by_key and grade.status == BY_TEACHER else grade


def _with_needs(keys: list[str] | None) -> list[Todo]:
    """The TODOs in `keys` (every one if None) and those they need, in TODOS' order."""
    wanted = set(BY_KEY if keys is None else keys)
    while needed := {n for k in wanted for n in BY_KEY[k].needs} - wanted:
        wanted |= needed
    return [t for t in TODOS if t.key in wanted]


def _in_short(g: Grade) -> str:
    """A needed TODO's verdict in one short line, for the row it blocks: blank.TEXT, "hangs at ...", "FAIL: ..."."""
    if g.status == "not done":
        return blank.TEXT
    line = (g.detail if g.detail.startswith(g.status) else f"{g.status}: {g.detail}").splitlines()[0]
    return line if len(line) <= SHORT else line[:SHORT].rsplit(" ", 1)[0] + " ..."


def _needs(unmet: list[Grade]) -> str:
    """The TODOs that did not pass, each with its verdict in short, on one line: "A and B1 (<blank.TEXT>), B2 (hangs
    at data.py:150 on rank 0 (waits in all_gather_object))"."""
    reasons: dict[str, list[str]] = {}  # one verdict, the keys it stops: "A and B1 (<blank.TEXT>)"
    for g in unmet:
        reasons.setdefault(_in_short(g), []).append(g.todo.key)
    return ", ".join(f"{_listed(keys)} ({why})" for why, keys in reasons.items())


def blocked(todo: Todo, unmet: list[Grade]) -> Grade:
    """`todo`, not run: "needs " and the TODOs it needs that did not pass, to fix first (_needs)."""
    return Grade(todo, "blocked", f"needs {_needs(unmet)}", blocked_by=tuple(unmet))


def _listed(keys: list[str]) -> str:
    """"A", "A and B1", "A, B1 and D"."""
    return f"{', '.join(keys[:-1])} and {keys[-1]}" if len(keys) > 1 else keys[0]


def _key_at_hand() -> bool:
    """Whether this process can import notebook 16's key (the reference; not a student edition)."""
    from minitrain.lab.grading.graders.diagnosis import the_key
    return the_key() is not None


_server: Forkserver | None = None
_server_lock = threading.Lock()


def shared_server() -> Forkserver:
    """This process's grading server, started at its first use (torch's import: seconds), again if it died, closed
    at exit: every tree graded here forks its children from it."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive():
            _server = Forkserver()
            atexit.register(_server.close)
        return _server


def _tree_env(repo: Path, env: dict[str, str] | None) -> dict[str, str]:
    """The environment `repo`'s graders run in: this one, `repo`/src first on PYTHONPATH, the graders' collective
    timeout (yours if you set MINITRAIN_COLLECTIVE_TIMEOUT), `env` added."""
    pythonpath = os.pathsep.join([str(repo / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    timeout = os.environ.get("MINITRAIN_COLLECTIVE_TIMEOUT", "").strip() or f"{GRADERS_COLLECTIVE_TIMEOUT_S:g}"
    return {**os.environ, "PYTHONPATH": pythonpath, WATCH_PID: str(os.getpid()),
            "MINITRAIN_COLLECTIVE_TIMEOUT": timeout, **(env or {})}


def run_with_reference(reference: Path, repo: Path, todo: Todo, unmet: list[Grade], timeout_s: float | None = None,
                       env: dict[str, str] | None = None) -> Grade:
    """`todo` graded in a copy of `repo` whose files of the `unmet` TODOs it needs are `reference`'s (class grading:
    a mistake costs its own points once); its detail says so."""
    files = sorted({g.todo.file for g in unmet})
    with tempfile.TemporaryDirectory(prefix="minitrain-with-reference-") as tmp:
        tree = Path(shutil.copytree(repo, Path(tmp) / repo.name, symlinks=True))
        for rel in files:
            shutil.copy(reference / rel, tree / rel)
        grade = run_todo(tree, todo, timeout_s, env)
    names = _listed([f"{Path(rel).name}" for rel in files])
    grade.detail = f"graded with the reference's {names} in place of yours ({_needs(unmet)}): {grade.detail}"
    grade.stand_ins = tuple(unmet)
    return grade


def grade_repo(repo: Path, keys: list[str] | None = None, timeout_s: float | None = None,
               echo: Callable[[str], None] | None = None, jobs: int = 1, env: dict[str, str] | None = None,
               reference: Path | None = None) -> list[Grade]:
    """Every TODO of `repo` (or those in `keys`, and those they need), each in a process of its own, `jobs` at a
    time (1 by default: the timing graders measure waits, which a busy machine blurs), a TODO's needs first (one
    that does not pass blocks it: not run; with a `reference` tree, it is graded with the reference's files of
    those it needs instead, and a "teacher" row with the key, here), forked from the shared server, `repo`/src
    first on PYTHONPATH, `env` added (e.g. MINITRAIN_COLLECTIVE_TIMEOUT; minitrain.lab.grading.forkserver)."""
    repo = Path(repo).resolve()
    waiting = _with_needs(keys)
    order = [t.key for t in waiting]
    by_key = reference is not None and _key_at_hand()
    grades: dict[str, Grade] = {}
    running: dict[Future, Todo] = {}

    def done(grade: Grade) -> None:
        grades[grade.todo.key] = grade
        if echo:
            echo(format_row(grade))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while waiting or running:
            for todo in [t for t in waiting if all(k in grades for k in t.needs)]:  # in TODOS' order
                unmet = [grades[k] for k in todo.needs if grades[k].status != "PASS"]
                if unmet and reference is None:
                    waiting.remove(todo)
                    done(blocked(todo, unmet))
                elif len(running) < jobs:  # no more in flight than `jobs`: a TODO ready next goes first
                    waiting.remove(todo)
                    job = ((run_with_reference, reference, repo, todo, unmet, timeout_s, env) if unmet
                           else (run_graded, repo, todo, timeout_s, env, by_key))
                    running[pool.submit(*job)] = todo
            if running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    running.pop(future)
                    done(future.result())
        return [grades[k] for k in order]


def format_row(g: Grade) -> str:
    """A TODO's line of the table; a blocked one, never run, has no time; one graded by the teacher, no points."""
    seconds = "" if g.status == "blocked" else f" ({g.seconds:.0f} s)"
    points = "-" if g.status == BY_TEACHER else g.points  # not graded here: no point lost
    return (f"{g.todo.key:<5} {g.todo.file:<40} {points}/{g.todo.points}  {g.status:<8}  {g.todo.what}: {g.detail}"
            + seconds)


def _by_part(row: list[Grade]) -> dict[str, list[Grade]]:
    """The grades of each part of the lab that `row` holds, in PARTS' order."""
    return {part: [g for g in row if g.todo.part == part] for part in PARTS if any(g.todo.part == part for g in row)}


def _points(grades: list[Grade]) -> tuple[int, int]:
    """The points `grades` earned, and out of how many (a row graded by the teacher counts in neither)."""
    graded = [g for g in grades if g.status != BY_TEACHER]
    return sum(g.points for g in graded), sum(g.todo.points for g in graded)


def part_score(grades: list[Grade]) -> str:
    """One part's points, "12/15", or "not started 0/3" when grading saw no work in any of its TODOs; then the
    rows the teacher grades: "3/3, ex16a, ex16b and ex16c graded by your teacher"."""
    score = "{}/{}".format(*_points(grades))
    score = score if any(g.started for g in grades) else f"not started {score}"
    by_teacher = [g.todo.key for g in grades if g.status == BY_TEACHER]
    return score + (f", {_listed(by_teacher)} graded by your teacher" if by_teacher else "")


def summary(row: list[Grade]) -> str:
    """make grade's last line, each part apart: "the sheet 15/15, exercises beyond it 3/3, optional (notebook 15)
    not started 0/3"."""
    return ", ".join(f"{PARTS[part]} {part_score(grades)}" for part, grades in _by_part(row).items())


def submission_tree(submission: Path, fresh: Path, out: Path) -> Path:
    """A copy of the fresh student tree `fresh` in `out` with the learner's files from `submission`: what each TODO
    of the registry collects (its file, the run's artifacts), and the notebooks, found by name where not in place."""
    shutil.copytree(fresh, out, symlinks=True)
    for rel in dict.fromkeys(rel for todo in TODOS for rel in todo.collected):
        if (submission / rel).is_dir():
            shutil.copytree(submission / rel, out / rel, dirs_exist_ok=True)
        elif (submission / rel).is_file():
            shutil.copy(submission / rel, out / rel)
    for notebook in (fresh / "notebooks").glob("*.ipynb"):
        found = [submission / "notebooks" / notebook.name] if (submission / "notebooks" / notebook.name).is_file() \
            else sorted(submission.rglob(notebook.name))
        if found:
            shutil.copy(found[0], out / "notebooks" / notebook.name)
    return out


def grade_class(folder: Path, keys: list[str] | None = None, timeout_s: float | None = None,
                echo: Callable[[str], None] = print, jobs: int = 1) -> dict[str, list[Grade]]:
    """Every submission (a subfolder) of `folder`, graded in a fresh student tree of its own; run from the reference,
    a TODO whose needs failed with the reference's files of them, and notebook 16's answers with the key, in this
    process; writes folder/grades.csv (one row per submission: each TODO's status and points, each part's points)."""
    from minitrain.lab.editions.student_edition import write_student_edition
    folder = Path(folder)
    submissions = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not submissions:
        raise ValueError(f"--class {folder}: no submission folders in it (one folder per learner)")
    reference = None if (REPO / EDITION_MARK).exists() else REPO  # the reference's files, where they are
    grades: dict[str, list[Grade]] = {}
    with tempfile.TemporaryDirectory(prefix="minitrain-class-") as tmp:
        fresh = Path(tmp) / "fresh"
        write_student_edition(fresh)
        if DEFAULT_CORPUS_DIR.is_dir():
            shutil.copytree(DEFAULT_CORPUS_DIR, fresh / DEFAULT_CORPUS_DIR.relative_to(REPO))
        for submission in submissions:
            tree = submission_tree(submission, fresh, Path(tmp) / submission.name)
            echo(f"--- {submission.name}")
            grades[submission.name] = grade_repo(tree, keys, timeout_s, echo, jobs, reference=reference)
            shutil.rmtree(tree)
    write_csv(folder / "grades.csv", grades)
    return grades


def write_csv(path: Path, grades: dict[str, list[Grade]]) -> None:
    """One row per submission: each TODO's status and points, then each part's points and out of (sheet 15, ...)."""
    first = next(iter(grades.values()))
    parts = list(_by_part(first))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", *(f"{g.todo.key} {c}" for g in first for c in ("status", "points")),
                         *(f"{p}{c}" for p in parts for c in ("", " out of"))])
        for name, row in grades.items():
            totals = (x for part in _by_part(row).values() for x in _points(part))
            writer.writerow([name, *(x for g in row for x in (g.status, g.points)), *totals])


def class_table(grades: dict[str, list[Grade]]) -> str:
    """Each submission's statuses, a column per TODO ("*": graded with the reference's files of a TODO it needs),
    then each part's score (part_score)."""
    first = next(iter(grades.values()))
    width = max(len("submission"), *map(len, grades))
    lines = [f"{'submission':<{width}}  " + "  ".join(f"{g.todo.key:<9}" for g in first)
             + "".join(f"  {p:<16}" for p in _by_part(first)).rstrip()]
    for name, row in grades.items():
        lines.append(f"{name:<{width}}  " + "  ".join(f"{g.status + '*' * bool(g.stand_ins):<9}" for g in row)
                     + "".join(f"  {part_score(part):<16}" for part in _by_part(row).values()).rstrip())
    if any(g.stand_ins for row in grades.values() for g in row):
        lines.append("*: graded with the reference's version of a TODO it needs that did not pass (its row says which)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = LabArgumentParser(description="Grade the lab's TODOs by the real tests, each in a process of its own.")
    p.add_argument("repo", nargs="?", type=Path, default=REPO, help="the tree to grade (default: this one)")
    p.add_argument("--class", dest="class_folder", type=Path, metavar="FOLDER",
                   help="grade every submission folder in FOLDER; writes FOLDER/grades.csv")
    p.add_argument("--only", action="append", choices=list(BY_KEY),
                   help="grade only this TODO (repeatable), and the TODOs it needs, first (shown too)")
    p.add_argument("--timeout", type=positive_float, default=None, help="seconds per TODO (default: each TODO's own)")
    p.add_argument("--jobs", type=positive_int, default=1, help="TODOs graded at once (default 1: the timing graders "
                   "measure waits, which a busy machine blurs)")
    p.add_argument("--todo", choices=list(BY_KEY), help=argparse.SUPPRESS)  # the child's mode
    args = p.parse_args(argv)
    if args.todo:
        return _child(args.repo.resolve(), args.todo)
    if args.class_folder is not None:
        if not args.class_folder.is_dir():
            p.error(f"--class {args.class_folder}: not a folder")
        try:
            grades = grade_class(args.class_folder, args.only, args.timeout, jobs=args.jobs)
        except ValueError as e:
            p.error(str(e))
        print(class_table(grades))
        print(f"grades: {relative(args.class_folder / 'grades.csv')}")
        return 0
    if not (args.repo / "src" / "minitrain").is_dir():
        p.error(f"{args.repo} is not a lab repository (no src/minitrain in it)")
    print(f"grading {relative(args.repo)}: each TODO in a process of its own, after the TODOs it needs")
    print(summary(grade_repo(args.repo, args.only, args.timeout, echo=print, jobs=args.jobs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
