"""The student edition (`make student`): the whole repository, with the learner's TODOs blank.

    python -m minitrain.lab.student --out build/student

Every tracked file is copied (`git ls-files`; without git, the tree minus .git, .venv, build and
data), except the sheet's artifacts of the reference run, the teacher's kit (with the modules that write
the key, the rubric and Block G's reference paragraph: no answer is generated for the learner) and the
tests of the reference edition itself (EXCLUDED). In .py files and notebooks each solution region, the lines
from `### BEGIN SOLUTION: <what>` to `### END SOLUTION` (a plain `### BEGIN SOLUTION`, as nbgrader
writes it, is named after the function it is in), becomes at the marker's indentation
`# YOUR CODE HERE (<what>)` and `raise NotDone("<what>")` (minitrain.todo's exception, whose message says "not done
yet: <what>"), and the file or cell imports NotDone beside its other imports. Notebooks also lose their outputs and
execution counts, their solution cells open, and a markdown paragraph about the reference
solution goes (REFERENCE_TEXT): the paragraph that says where the learner's code goes keeps its
first sentence and says what to replace instead.

nbgrader itself is not a dependency: it pins its own Jupyter stack (notebook 7, jupyterlab <5,
jupyter_client <9, ...), which would move the JupyterLab, nbclient, papermill and nbval this lab is
tested with. The reference notebooks keep nbgrader's metadata (schema version 3), so a teacher who
uses nbgrader can run `nbgrader generate_assignment` on them.
"""

import argparse
import ast
import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import TEACHER_FILES, TODOS
from minitrain.paths import EDITION_MARK, REPO, relative

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_LINE = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION(?::\s*(?P<what>.*?))?\s*$")
END_LINE = re.compile(r"^\s*### END SOLUTION\s*$")
DEF_LINE = re.compile(r"^(?P<indent>\s*)(?:async\s+)?(?:def|class)\s+(?P<name>\w+)")
SKIPPED_DIRS = (".git", ".venv", "build", "data")  # without git: what is never tracked
BLOCK_G_MODULE = "src/minitrain/lab/teaching/reference.py"  # the reference's paragraph, which its Block G solution calls
EXCLUDED = (  # the reference run's artifacts (the learner makes their own), the teacher's kit, the reference's own tests
    "experiments/35-ddp-cpu/state-rank-*.pt", "experiments/35-ddp-cpu/timings.jsonl",
    "experiments/35-ddp-cpu/run.json", "experiments/35-ddp-cpu/manifest.json",
    "experiments/35-ddp-cpu/scaling.png", "experiments/35-ddp-cpu/run-2proc.ipynb",
    "experiments/35-ddp-cpu/single-process/*", "experiments/35-ddp-cpu/repeats/*",
    "experiments/35-ddp-cpu/notebook-times.json",  # the reference machine's times: 01 shows the learner's own
    "solutions/*", "TEACHER.md", "docs/teachers.md", "docs/provenance.md",
    # the teacher's modules: the key and the rubric's graded answers, and Block G's paragraph written from the numbers;
    # and the shim that `python -m minitrain.lab.teacher` runs
    "src/minitrain/lab/teaching/refresh.py", "src/minitrain/lab/teaching/rubric.py", "src/minitrain/lab/teacher.py",
    # each TODO's own: its key, its grader's tests on near-answers (the registry's teacher_files)
    *TEACHER_FILES,
    # the reference's own tests: of the editions, the graders and grading (with the near-answers they grade), the
    # registry against the reference's solution regions, the committed artifacts
    "tests/minitrain/test_student.py", "tests/minitrain/test_graders.py", "tests/minitrain/test_grade.py",
    "tests/project/test_registry.py", "tests/project/test_committed_artifacts.py", ".ci/front-door",
    # the tests of the teacher's modules, and the earlier sitting's manifest whose paragraph they quote
    "tests/minitrain/test_check.py", "tests/minitrain/test_report.py", "tests/minitrain/example_manifest.json",
)
STARTS_AS = {t.file: t.starts_as for t in TODOS if t.starts_as}  # a fix's file starts as the broken script
REFERENCE_ONLY = ("<!-- reference only -->", "<!-- /reference only -->")  # .md lines the student edition drops
REFERENCE_TEXT = re.compile(r"reference solution|student edition|\bcollapsed\b", re.IGNORECASE)
WHERE_IT_GOES = re.compile(r"^(The next cell is where `[^`]+` goes)")
YOUR_TURN = (": replace `# YOUR CODE HERE` and the `raise NotDone(...)` under it with your code, "
             "run it, then run the grader after it.")


def stub(indent: str, what: str) -> list[str]:
    """The two lines that replace a solution region about `what`."""
    return [f"{indent}# YOUR CODE HERE ({what})", f"{indent}{blank.stub(what)}"]


def _with_import(source: str) -> str:
    """`source` (its stubs written) importing NotDone after its last top-level import, or after its docstring."""
    lines = source.split("\n")
    try:
        body = ast.parse(source).body
    except SyntaxError:  # a cell's IPython syntax: the import goes first
        body = []
    at, last = 0, None
    for n, node in enumerate(body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            at, last = node.end_lineno, node
        elif n == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            at = node.end_lineno  # the module's docstring
        else:
            break
    ours = isinstance(last, ast.ImportFrom) and (last.module or "").startswith("minitrain")
    before = [""] if last is not None and not ours else []  # PEP 8: a blank line between third-party and our imports
    after = [""] * (2 if at < len(lines) and DEF_LINE.match(lines[at]) else 1 if at < len(lines) and lines[at].strip()
                    else 0)  # two lines before a top-level def, one before other code
    return "\n".join(lines[:at] + before + [blank.IMPORT, *after] + lines[at:])


def _enclosing(lines: list[str], indent: str) -> str | None:
    """The name of the def or class the line after `lines` sits in (at `indent`)."""
    for line in reversed(lines):
        m = DEF_LINE.match(line)
        if m and len(m["indent"]) < len(indent):
            return m["name"]
    return None


def clear_solution(source: str, where: str = "this cell") -> str:
    """`source` with each solution region replaced by the stub; `where` names a plain marker's
    region when no def or class encloses it."""
    lines: list[str] = []
    inside = False
    for n, line in enumerate(source.split("\n"), start=1):
        begin = BEGIN_LINE.match(line)
        if begin:
            if inside:
                raise ValueError(f"{where}, line {n}: nested {BEGIN!r}; close the region above with {END!r}")
            inside = True
            what = begin["what"] or _enclosing(lines, begin["indent"]) or where
            lines += stub(begin["indent"], what)
        elif END_LINE.match(line):
            if not inside:
                raise ValueError(f"{where}, line {n}: {END!r} without {BEGIN!r}")
            inside = False
        elif not inside:
            lines.append(line)
    if inside:
        raise ValueError(f"{where}: {BEGIN!r} without {END!r}")
    cleared = "\n".join(lines)
    return _with_import(cleared) if cleared != source and blank.IMPORT.split("  #")[0] not in cleared else cleared


def student_markdown(source: str) -> str:
    """A markdown cell without the paragraphs about the reference solution (REFERENCE_TEXT)."""
    kept = []
    for paragraph in source.split("\n\n"):
        if not REFERENCE_TEXT.search(paragraph):
            kept.append(paragraph)
        elif m := WHERE_IT_GOES.match(paragraph):
            kept.append(m[1] + YOUR_TURN)
    return "\n\n".join(kept)


def student_notebook(nb: nbformat.NotebookNode, name: str = "notebook", solutions: bool = False) -> nbformat.NotebookNode:
    """A copy of `nb` with its solutions cleared (kept with `solutions`), outputs removed, solution cells
    expanded, and no text about the reference solution."""
    nb = nbformat.from_dict(nb)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)  # the timestamps of the last run
        if cell.cell_type == "markdown":
            cell.source = student_markdown(cell.source)
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        if BEGIN in cell.source or cell.metadata.get("nbgrader", {}).get("solution"):
            cell.metadata.get("jupyter", {}).pop("source_hidden", None)
            if not cell.metadata.get("jupyter", True):
                del cell.metadata["jupyter"]
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not solutions:
            cell.source = clear_solution(cell.source, f"{name}: {grade_id or f'cell {index}'}")
    return nb


def tracked_files(repo: Path = REPO) -> list[str]:
    """The repository's files, relative: `git ls-files`, or the tree minus SKIPPED_DIRS without git."""
    if (repo / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True, check=True)
        return sorted(p for p in listed.stdout.split("\0") if p and (repo / p).is_file())
    return sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()
                  and p.relative_to(repo).parts[0] not in SKIPPED_DIRS
                  and "__pycache__" not in p.parts and not p.parent.name.endswith(".egg-info"))


def has_regions(text: str) -> bool:
    """True when `text` holds a solution region's first line."""
    return any(BEGIN_LINE.match(line) for line in text.splitlines())


def excluded(path: str, solutions: bool = False) -> bool:
    """True for a file the student edition leaves out; with `solutions`, the module Block G's solution calls stays."""
    return any(fnmatch.fnmatch(path, pattern) for pattern in EXCLUDED) and not (solutions and path == BLOCK_G_MODULE)


def check_out(out: Path, repo: Path = REPO) -> None:
    """Refuse an --out that would write over the repository: the repository itself, a folder
    holding it, a tracked folder, or a folder that is not empty and not a student edition."""
    out, repo = Path(out).resolve(), Path(repo).resolve()
    if out == repo or out in repo.parents:
        raise ValueError(f"--out {out} holds the repository itself: choose another, e.g. build/student")
    if repo in out.parents:
        top = out.relative_to(repo).parts[0]
        if any(p.split("/")[0] == top for p in tracked_files(repo)):
            raise ValueError(f"--out {relative(out)} is inside the tracked folder {top}/: choose another, "
                             "e.g. build/student")
    if out.is_file():
        raise ValueError(f"--out {out} is a file, not a folder: choose another, e.g. build/student")
    if out.is_dir() and any(out.iterdir()) and not (out / EDITION_MARK).is_file():
        raise ValueError(f"--out {out} is a folder that holds other files: choose an empty or new one")


def without_reference_only(text: str, where: str = "this file") -> str:
    """Markdown without its reference-only parts: the lines from REFERENCE_ONLY's first marker to its second."""
    kept, inside = [], False
    for n, line in enumerate(text.split("\n"), start=1):
        if line.strip() in REFERENCE_ONLY:
            if (line.strip() == REFERENCE_ONLY[0]) == inside:
                raise ValueError(f"{where}, line {n}: {line.strip()} out of order")
            inside = not inside
        elif not inside:
            kept.append(line)
    if inside:
        raise ValueError(f"{where}: {REFERENCE_ONLY[0]} without {REFERENCE_ONLY[1]}")
    return "\n".join(kept)


def student_file(path: Path, rel: str, solutions: bool = False) -> bytes:
    """The student edition of one file's content; with `solutions`, its solution regions as the reference has them
    (what a learner who pasted the key has)."""
    if path.suffix == ".md":
        return without_reference_only(path.read_text(), rel).encode()
    if path.suffix == ".ipynb":
        nb = student_notebook(nbformat.read(path, as_version=4), rel, solutions)
        nbformat.validate(nb)
        return (nbformat.writes(nb) + "\n").encode()
    if path.suffix == ".py":
        text = path.read_text()
        if solutions or not has_regions(text):
            return path.read_bytes()
        cleared = clear_solution(text, rel)
        compile(cleared, rel, "exec")  # a region that leaves broken code is the reference's bug: say so here
        return cleared.encode()
    return path.read_bytes()


def write_student_edition(out: Path, repo: Path = REPO, solutions: bool = False) -> list[str]:
    """The student edition of `repo` in `out` (written beside it, then moved into place), with the reference's
    solutions pasted in with `solutions`; returns the files written, relative."""
    check_out(out, repo)
    out = Path(out).resolve()
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    written = []
    try:
        for rel in tracked_files(repo):
            if excluded(rel, solutions):
                continue
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = rel if solutions else STARTS_AS.get(rel, rel)
            target.write_bytes(student_file(repo / source, rel, solutions))
            shutil.copymode(repo / rel, target)
            written.append(rel)
        (staging / EDITION_MARK).write_text("written by `python -m minitrain.lab.student`; rewritten by it\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write the student edition: the repository with the learner's TODOs blank.")
    p.add_argument("--out", type=Path, required=True, help="folder to (re)create, e.g. build/student")
    p.add_argument("--with-solutions", action="store_true",
                   help="keep the reference's solutions in place: the tree of a learner who pasted them (to try the edition)")
    args = p.parse_args(argv)
    try:
        written = write_student_edition(args.out, solutions=args.with_solutions)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    regions = sum(1 for rel in written if rel.endswith((".py", ".ipynb"))
                  and re.search(r'^\s*"?\s*### BEGIN SOLUTION', (REPO / rel).read_text(errors="replace"), re.M))
    kept = ("kept as the reference has them (--with-solutions)" if args.with_solutions else
            "replaced by '# YOUR CODE HERE (...)' and 'raise NotDone(\"...\")'")
    print(f"student edition: {len(written)} files in {relative(args.out)}; solution regions of {regions} files {kept}, "
          "notebook outputs cleared, no reference run artifacts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
