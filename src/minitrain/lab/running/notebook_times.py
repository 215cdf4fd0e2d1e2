"""How long each notebook took to execute in one lab run: notebook-times.json in the lab's output folder.

`python -m minitrain.lab` writes it once every other notebook has run, then executes 01 last, whose
path table (times_table) shows that very lab run; 01's own time is added when it ends. TEACHER.md's
table is written from the same file (minitrain.lab.teaching.refresh). It times a lab run, not a result the
notebooks compare: it has no `date` field, so minitrain.lab.reporting.sittings does not count it among the
committed results (a re-execution of the notebooks may come from a later sitting than the runs).
"""

import datetime
from pathlib import Path

from minitrain.artifacts import read_json_object, write_json
from minitrain.paths import NOTEBOOKS_DIR, relative
from minitrain.provenance import sitting

TIMES_FILE = "notebook-times.json"
ENTRY_NOTEBOOK = "01-ddp-cpu.ipynb"  # executed last: its table shows the times of the lab run it is part of
LAST_ON_THE_PATH = "06-scaling-and-report.ipynb"  # 01-06 are the core path (the sheet); 07-19 optional


def path_of(name: str) -> str:
    """'core' for the sheet's notebooks (01-06), 'optional' for the deeper ones."""
    return "core" if name <= LAST_ON_THE_PATH else "optional"


def numbered_notebooks(every: bool = True) -> list[str]:
    """notebooks/NN-*.ipynb, in order: the core path, then, with `every`, the optional ones."""
    return sorted(p.name for p in NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb") if every or path_of(p.name) == "core")


def lab_run(command: str, workers: int) -> dict:
    """The provenance of a lab run's times: its command, start, sitting and how many notebooks ran at once."""
    return {"command": command, "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "sitting": sitting(), "side_by_side": workers}


def write_times(folder: Path, seconds: dict[str, float | None], run: dict) -> Path:
    """notebook-times.json in `folder`: each notebook's seconds to 0.1 s (None: it failed), in notebook order, and `run`."""
    path = Path(folder) / TIMES_FILE
    write_json(path, {"notebooks": {name: s if s is None else round(s, 1) for name, s in sorted(seconds.items())}, **run})
    return path


def read_times(folder: Path) -> dict:
    """notebook-times.json of `folder`, or FileNotFoundError / ValueError naming the problem and `make lab`."""
    path = Path(folder) / TIMES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {TIMES_FILE} in {relative(path.parent)} yet: `make lab` writes it "
                                "(the seconds each notebook took to execute)")
    times = read_json_object(path, ValueError, relative(path), "run `make lab`", "run `make lab` again")
    if not isinstance(times.get("notebooks"), dict) or not all(k in times for k in ("command", "started", "sitting")):
        raise ValueError(f"{relative(path)} lacks its notebooks, command, started or sitting: run `make lab` again")
    return times


def shown_seconds(name: str, times: dict) -> str:
    """A notebook's seconds in the lab run of `times`, or why there are none."""
    if name not in times["notebooks"]:
        return ("runs last, timed when it ends" if name == ENTRY_NOTEBOOK else "not run in this lab run"
                + (" (`--all-notebooks` runs 07-19)" if path_of(name) == "optional" else ""))
    seconds = times["notebooks"][name]
    return "failed" if seconds is None else f"{seconds:.0f}"


def provenance_line(times: dict) -> str:
    """Which lab run the times come from: command, start, sitting, and how the notebooks ran."""
    return (f"lab run `{times['command']}`, started {times['started']}, sitting {times['sitting']}: "
            f"06 first, then up to {times.get('side_by_side', 1)} notebooks at a time, 01 last, "
            "the checker beside them while it ran")


def times_table(folder: Path) -> str:
    """Every numbered notebook, core or optional, and the seconds it took in the lab run recorded in
    `folder`, then that run's provenance line; one line when no lab run has recorded times there."""
    try:
        times = read_times(folder)
    except (FileNotFoundError, ValueError) as e:
        return str(e)
    names = numbered_notebooks()
    width = max(len(n) for n in names)
    rows = [f"{'notebook':<{width}}  {'path':<8}  seconds to execute"]
    rows += [f"{name:<{width}}  {path_of(name):<8}  {shown_seconds(name, times)}" for name in names]
    return "\n".join(rows + ["", f"from {TIMES_FILE}: {provenance_line(times)}"])
