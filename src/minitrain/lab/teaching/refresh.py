"""The teacher's key, solutions/01-ddp-cpu-ref.md, quotes the reference code by name, the paragraph's
rubric, solutions/rubric-paragraph.md, is written from the committed manifest, and TEACHER.md's table of
the time per notebook and README's sum of the core path's from the committed notebook-times.json (the last lab
run's); this refreshes them all.

    python -m minitrain.lab.teacher            # rewrite every quote from the current sources, the rubric, the times
    python -m minitrain.lab.teacher --check    # exit 1 when a quote, the rubric or the times are stale

A quote is a line `<!-- quote: FILE::NAME -->` followed by a fenced python block: NAME is a
function or class of FILE (`Class.method` for a method), or the nbgrader grade_id of a notebook's cell.
"""

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat

from minitrain.lab.reporting.manifest import Manifest, ManifestError
from minitrain.lab.running.notebook_times import (TIMES_FILE, numbered_notebooks, path_of, provenance_line, read_times,
                                                  shown_seconds)
from minitrain.lab.teaching.rubric import MANIFEST, RUBRIC, rubric_text
from minitrain.paths import EXPERIMENT_DIR, REPO, relative

KEY = REPO / "solutions" / "01-ddp-cpu-ref.md"
QUOTE = re.compile(r"<!-- quote: (?P<file>[^:\s]+)::(?P<name>[\w.-]+) -->\n```python\n(?P<code>.*?)```", re.S)
GUIDE = REPO / "TEACHER.md"
README = REPO / "README.md"
MACHINE_PART = re.compile(r"^The machine's part of those six notebooks.*?before them\.", re.M | re.S)
TIMES = EXPERIMENT_DIR / TIMES_FILE
TIME_ROW = re.compile(r"^\| (?P<nn>\d\d) (?P<what>[^|]+?) \| (?:core|optional) \| [^|]* \|$", re.M)
TIMES_FROM = re.compile(r"^Times from `[^`]*`: .*(?:\n.+)*", re.M)  # to the paragraph's end


def source_of(file: str, name: str) -> str:
    """The reference source of `name` in `file` (a definition, or a notebook cell by grade_id)."""
    path = REPO / file
    if path.suffix == ".ipynb":
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == name:
                return cell.source.rstrip("\n") + "\n"
        raise ValueError(f"{file} has no cell with grade_id {name!r}")
    text = path.read_text()
    body: list[ast.stmt] = ast.parse(text).body
    node = None
    for part in name.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise ValueError(f"{file} defines no {name}")
        body = node.body
    lines = text.splitlines()
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    return "\n".join(line[indent:] for line in lines[start:node.end_lineno]) + "\n"


def refreshed(text: str) -> str:
    """`text` with every quote's code replaced by its source now."""
    return QUOTE.sub(lambda m: f"<!-- quote: {m['file']}::{m['name']} -->\n```python\n"
                               f"{source_of(m['file'], m['name'])}```", text)


def guide_with_times(text: str, times: dict) -> str:
    """TEACHER.md's `text` with each row of its time table (`| NN what | path | seconds |`) given the
    notebook's path and seconds from `times` (notebook-times.json), and the line under it naming that lab run."""
    names = {name[:2]: name for name in numbered_notebooks()}
    rows = [m["nn"] for m in TIME_ROW.finditer(text)]
    if sorted(rows) != sorted(names) or not TIMES_FROM.search(text):
        raise ValueError(f"its time table has rows {', '.join(rows)} for notebooks {', '.join(sorted(names))}, "
                         "and it needs a line starting 'Times from `...`:' under it")
    text = TIME_ROW.sub(lambda m: f"| {m['nn']} {m['what']} | {path_of(names[m['nn']])} | "
                                  f"{shown_seconds(names[m['nn']], times)} |", text)
    return TIMES_FROM.sub(lambda _: f"Times from `{relative(TIMES)}`: {provenance_line(times)}.", text)


def readme_with_times(text: str, times: dict) -> str:
    """README's `text` with its sentence on the machine's part of the core path written from `times`
    (notebook-times.json): the sum of notebooks 01-06's seconds, how many ran at once, the sitting."""
    core = [times["notebooks"].get(name) for name in numbered_notebooks(every=False)]
    if None in core:
        raise ValueError(f"{relative(TIMES)} lacks a time of notebooks 01-06 (not run, or failed): run `make lab` again")
    if not MACHINE_PART.search(text):
        raise ValueError("it needs a sentence starting \"The machine's part of those six notebooks\" and ending "
                         "\"before them.\"")
    at_once = times.get("side_by_side", 1)
    sentence = (f"The machine's part of those six notebooks, with every TODO written, added up to {sum(core):.0f} s "
                "when the reference edition's notebooks were last executed ("
                + ("one at a time" if at_once == 1 else f"{at_once} at a time") + f"; {times['sitting']}), not "
                "counting the measured runs that `make lab` makes before them.")
    return MACHINE_PART.sub(lambda _: sentence, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Refresh the quotes of the teacher's key from the reference sources, "
                                            "the paragraph's rubric from the committed manifest, and TEACHER.md's "
                                            "and README.md's times from the committed notebook-times.json.")
    p.add_argument("--check", action="store_true", help="only say whether a quote, the rubric or the times are stale "
                                                        "(exit 1)")
    args = p.parse_args(argv)
    text = KEY.read_text()
    try:
        new = refreshed(text)
    except ValueError as e:
        print(f"error: {relative(KEY)}: {e}", file=sys.stderr)
        return 2
    try:
        rubric = rubric_text(Manifest.read(MANIFEST))
    except ManifestError as e:
        print(f"error: {relative(RUBRIC)}: {e}", file=sys.stderr)
        return 2
    no_times = ""
    try:
        times = read_times(TIMES.parent)
    except FileNotFoundError as e:  # no lab run has recorded its times yet: the times are not derived
        times, no_times = None, f"{e}; then run `python -m minitrain.lab.teacher`"
    except ValueError as e:
        print(f"error: {relative(GUIDE)}: {e}", file=sys.stderr)
        return 2
    timed = {}  # TEACHER.md and README.md -> (as they are, with the times written; None: no times yet)
    for path, write in ((GUIDE, guide_with_times), (README, readme_with_times)):
        try:
            timed[path] = path.read_text(), None if times is None else write(path.read_text(), times)
        except ValueError as e:
            print(f"error: {relative(path)}: {e}", file=sys.stderr)
            return 2
    if args.check:
        stale = [f"{a['file']}::{a['name']}" for a, b in zip(QUOTE.finditer(text), QUOTE.finditer(new))
                 if a["code"] != b["code"]]
        print(f"{relative(KEY)}: " + (f"stale quotes: {', '.join(stale)}; run `python -m minitrain.lab.teacher`"
                                     if stale else f"{len(QUOTE.findall(text))} quotes up to date"))
        rubric_stale = not RUBRIC.exists() or RUBRIC.read_text() != rubric
        print(f"{relative(RUBRIC)}: " + (f"differs from the one written from {relative(MANIFEST)}; run "
                                        "`python -m minitrain.lab.teacher`" if rubric_stale else "up to date"))
        times_stale = [path for path, (old, new_text) in timed.items() if new_text != old]
        for path, (old, new_text) in timed.items():
            print(f"{relative(path)}: " + (no_times if new_text is None else
                                          f"its times differ from {relative(TIMES)}; run `python -m minitrain.lab.teacher`"
                                          if new_text != old else f"times up to date with {relative(TIMES)}"))
        return 1 if stale or rubric_stale or times_stale else 0
    Path(KEY).write_text(new)
    RUBRIC.write_text(rubric)
    print(f"{relative(KEY)}: {len(QUOTE.findall(new))} quotes refreshed")
    print(f"{relative(RUBRIC)}: written from {relative(MANIFEST)}")
    if times is None:
        print(f"{relative(GUIDE)}, {relative(README)}: left as they are: {no_times}", file=sys.stderr)
        return 1
    for path, (_, new_text) in timed.items():
        path.write_text(new_text)
        print(f"{relative(path)}: times written from {relative(TIMES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
