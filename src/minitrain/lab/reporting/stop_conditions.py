"""Check the lab's five stop conditions on an experiment folder and print a pass/fail table.

    python -m minitrain.lab.check [FOLDER] [--skip-tests]

Exits 1 when any condition fails. Every condition is checked on its own, so one failure does
not hide another.
"""

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from minitrain.lab.reporting.disturbance import disturbance, disturbance_note
from minitrain.lab.reporting.manifest import Manifest, ManifestError
from minitrain.lab.reporting.paragraph import paragraph_problems
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.lab.todos import blank
from minitrain.launch import LaunchError, run_streaming
from minitrain.paths import EXPERIMENT_DIR, REPO
from minitrain.timing import VARIANTS, manifest_fields, summarize
from minitrain.verify import CLOSE, StateFileError, compare_state_files

DDP_TESTS = REPO / "tests" / "minitrain" / "test_ddp.py"
DDP_TESTS_PLUGINS_OFF = ("-p", "no:nbval", "-p", "no:cacheprovider")  # nbval's import is a second of CPU; no cache
DDP_TESTS_TIMEOUT = 600  # seconds; they start real 2-process gloo runs, far longer than the other checks
FILES = ("train.py", "timings.jsonl", "scaling.png", "manifest.json", "state-rank-0.pt", "state-rank-1.pt")
RTOL = 1e-6  # manifest figures against the same figures recomputed here
TIMED = tuple(v.field for v in VARIANTS)  # timings.jsonl keys summarized in the manifest
# manifest field -> (timings.jsonl key, minitrain.timing.summarize statistic)
TIMING_FIELDS = {name: (v.field, stat) for v in VARIANTS for name, stat in manifest_fields(v).items()}
PLACEHOLDER = re.compile(r"<[^<>]+>")  # "<filled in>", "<true/false>", ...
MEANS = {"byte_equivalent": "the sheet's name for the allclose verdict", "bitwise_equal": "the bytes compared"}


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    skipped: bool = False  # a skipped check is shown but is not a failure
    warning: bool = False  # a warning is shown but is not a failure either

    @property
    def status(self) -> str:
        return "SKIPPED" if self.skipped else "WARN" if self.warning else "PASS" if self.passed else "FAIL"


class CheckFailed(Exception):
    """A condition does not hold; the message says exactly why."""


class CheckWarning(Exception):
    """Not a failure, but the learner must know: the message says what and what to do."""


class CheckSkipped(Exception):
    """Nothing to judge, and another row names why; the message says which."""


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_manifest(folder: Path) -> Manifest:
    """manifest.json as a Manifest, or CheckFailed saying why it cannot be read."""
    try:
        return Manifest.read(folder / "manifest.json")
    except ManifestError as e:
        raise CheckFailed(str(e)) from e


def validated_timings(path: Path) -> list[dict]:
    """timings.jsonl's records; CheckFailed names the first line that is malformed."""
    if not path.is_file():
        raise CheckFailed("timings.jsonl is missing")
    records = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise CheckFailed(f"timings.jsonl line {n} is not valid JSON, truncated? ({e.msg})") from e
        bad = [key for key in TIMED if not is_number(record.get(key) if isinstance(record, dict) else None)]
        if bad:
            raise CheckFailed(f"timings.jsonl line {n} has no number for {', '.join(bad)}")
        records.append(record)
    return records


def placeholders(value: object, where: str = "") -> dict[str, str]:
    """Fields under `value` (a manifest, recursively) still holding a placeholder like "<filled in>"."""
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return {path: what for key, item in items
                for path, what in placeholders(item, f"{where}.{key}" if where else str(key)).items()}
    match = PLACEHOLDER.search(value) if isinstance(value, str) else None
    return {where: f"holds the placeholder {match.group()!r}"} if match else {}


def check_files(folder: Path) -> str:
    """Condition 1: all six files exist and are not empty."""
    missing = [name for name in FILES if not (folder / name).is_file()]
    empty = [name for name in FILES if name not in missing and (folder / name).stat().st_size == 0]
    if missing or empty:
        raise CheckFailed("; ".join(f"{label}: {', '.join(names)}"
                                    for label, names in (("missing", missing), ("empty", empty)) if names))
    return f"all {len(FILES)} files present"


def check_equivalence(folder: Path) -> str:
    """Condition 2: both ranks' states are allclose (minitrain.verify.CLOSE), and the manifest says so too:
    byte_equivalent, the sheet's name for that allclose verdict, and bitwise_equal, the byte comparison."""
    try:
        result = compare_state_files(folder / "state-rank-0.pt", folder / "state-rank-1.pt")
    except StateFileError as e:
        raise CheckFailed(str(e)) from e
    problems = []
    if not result.allclose:
        worst = max(result.per_tensor, key=result.per_tensor.get)
        problems.append(f"the ranks' states differ: max |diff| {result.max_abs_diff:.3e} "
                        f"in {worst!r} (allclose: {CLOSE})")
    manifest = load_manifest(folder)
    for key, found in (("byte_equivalent", result.allclose), ("bitwise_equal", result.bitwise_equal)):
        if getattr(manifest, key) is not found:
            problems.append(f"manifest {key} ({MEANS[key]}) is {getattr(manifest, key)!r}, the state files say {found}")
    claimed = manifest.max_abs_diff
    if not (is_number(claimed) and math.isclose(claimed, result.max_abs_diff, rel_tol=RTOL)):
        problems.append(f"manifest max_abs_diff is {claimed!r}, "
                        f"the state files say {result.max_abs_diff:.6g}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"allclose ({CLOSE}), max |diff| {result.max_abs_diff:.3e}, "
            f"bitwise equal: {result.bitwise_equal}; the manifest agrees")


def check_timing(folder: Path) -> str:
    """Condition 3: the manifest's fields are filled in and its all-reduce statistics match timings.jsonl."""
    manifest = load_manifest(folder)  # every Manifest field present, or CheckFailed naming the missing ones
    values = asdict(manifest)
    wrong = placeholders(values)  # field -> what is wrong with it, the first finding per field
    for key, value in values.items():
        if value is None:
            wrong.setdefault(key, "is null")
    for key in TIMING_FIELDS:
        if not is_number(values[key]):
            wrong.setdefault(key, f"is {values[key]!r}, not a number")
    problems = [f"{key} {what}" for key, what in wrong.items()]
    steps, warmup = manifest.steps, manifest.warmup_steps
    if not (type(steps) is int and type(warmup) is int and 0 <= warmup < steps):
        problems.append(f"steps {steps!r} and warmup_steps {warmup!r} are not integers with "
                        "0 <= warmup_steps < steps")
    if problems:
        raise CheckFailed("; ".join(problems))
    records = validated_timings(folder / "timings.jsonl")
    if len(records) != steps:
        raise CheckFailed(f"timings.jsonl has {len(records)} lines, the manifest says steps = {steps}")
    for field, (key, stat) in TIMING_FIELDS.items():
        value = summarize([r[key] for r in records[warmup:]])[stat]
        if not math.isclose(values[field], value, rel_tol=RTOL):
            problems.append(f"{field} is {values[field]:.6g}, timings.jsonl gives {value:.6g}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"all-reduce p50 {manifest.allreduce_p50_ms:.2f} ms, p95 {manifest.allreduce_p95_ms:.2f} ms; "
            f"matches timings.jsonl steps {warmup}-{steps - 1}")


def figures_missing(m: Manifest) -> list[str]:
    """The manifest's figures the lesson check needs that are not numbers."""
    scalars = ("tokens_per_sec_1proc", "tokens_per_sec_2proc", "speedup_2proc", "allreduce_share_of_step",
               "step_p50_ms_1proc", "step_p50_ms_2proc")
    bad = [key for key in scalars if not is_number(getattr(m, key))]
    spread, repeats, phases = m.speedup_2proc_range, m.repeats, m.step_breakdown_ms
    if not (isinstance(spread, list) and len(spread) == 2 and all(map(is_number, spread))):
        bad.append("speedup_2proc_range")
    speedups = repeats.get("speedups") if isinstance(repeats, dict) else None
    if not (isinstance(speedups, list) and speedups and all(map(is_number, speedups))):
        bad.append("repeats.speedups")
    for n in ("1proc", "2proc"):
        runs = repeats.get(n) if isinstance(repeats, dict) else None
        if not (isinstance(runs, list) and runs and all(isinstance(r, dict) and is_number(r.get("tokens_per_sec"))
                                                        for r in runs)):
            bad.append(f"repeats.{n}[].tokens_per_sec")
        if not (isinstance(phases, dict) and isinstance(phases.get(n), dict)
                and all(map(is_number, phases[n].values()))):
            bad.append(f"step_breakdown_ms.{n}")
    return bad


def check_lesson_notes(folder: Path) -> str:
    """Condition 4: the learner's paragraph states the manifest's figures and the verdict the repeats
    give, in at most 180 words (minitrain.lab.reporting.paragraph); the manifest's figures agree with each other.

    A number check cannot judge causes: a right paragraph with a false cause appended passes here.
    The teacher's rubric (solutions/rubric-paragraph.md) grades that.
    """
    m = load_manifest(folder)
    bad = figures_missing(m)
    if bad:
        raise CheckFailed(f"manifest has no number for {', '.join(bad)}")
    problems = []
    ratio = m.tokens_per_sec_2proc / m.tokens_per_sec_1proc
    if not math.isclose(m.speedup_2proc, ratio, rel_tol=RTOL):
        problems.append(f"speedup_2proc is {m.speedup_2proc:.6g}, tokens_per_sec_2proc / tokens_per_sec_1proc "
                        f"is {ratio:.6g}")
    speedups = m.repeats["speedups"]
    if m.speedup_2proc_range != [min(speedups), max(speedups)]:
        problems.append(f"speedup_2proc_range is {m.speedup_2proc_range}, the repeats give "
                        f"{[min(speedups), max(speedups)]}")
    tps = {n: [r["tokens_per_sec"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    verdict = verdict_over_repeats(tps[2], tps[1])
    if m.verdict != verdict:
        problems.append(f"verdict is {m.verdict!r}, the repeats' tokens/s give {verdict!r}")
    problems += paragraph_problems(m.lesson_notes, replace(m, verdict=verdict))
    if problems:
        raise CheckFailed("\n".join(problems))  # one a line: each names what it found, what it expected, the fix
    lo, hi = m.speedup_2proc_range
    return (f"states the 2-vs-1 ratio (repeats' median {m.paired_speedup():.2f}x, range {lo:.2f}-{hi:.2f}x, "
            f"{verdict}), the tokens/s and the all-reduce's share of a step, {len(m.lesson_notes.split())} words; "
            "causes are the rubric's to judge")


def check_disturbance(folder: Path) -> str:
    """Not a stop condition: the repeats look disturbed by other programs (minitrain.lab.reporting.disturbance),
    recomputed from the manifest's repeats, so a manifest written before the field is checked too."""
    try:
        m = load_manifest(folder)
    except CheckFailed as e:
        raise CheckSkipped("no manifest to read (the rows above say why)") from e
    if bad := [name for name in figures_missing(m) if name.startswith("repeats.")]:
        raise CheckSkipped(f"the manifest has no number for {', '.join(bad)} (the lesson notes row names them)")
    tps = {n: [r["tokens_per_sec"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    reasons = disturbance(tps[1], tps[2], m.threads_per_rank["1proc"], m.threads_per_rank["2proc"])
    if reasons:
        raise CheckWarning(disturbance_note(reasons))
    return (f"no repeat under half its configuration's fastest: "
            f"1 process {min(tps[1]):,.0f}-{max(tps[1]):,.0f} tokens/s, "
            f"2 processes {min(tps[2]):,.0f}-{max(tps[2]):,.0f}")


def check_ddp_tests() -> str:
    """Condition 5: tests/minitrain/test_ddp.py (Block A's grader) passes, in a child pytest; the student
    edition's skip of a blank TODO is not a pass (-rfEs: pytest's lines of the failures, errors and skips)."""
    output: list[str] = []
    try:
        run_streaming([sys.executable, "-m", "pytest", "-q", "-rfEs", *DDP_TESTS_PLUGINS_OFF, str(DDP_TESTS)],
                      timeout=DDP_TESTS_TIMEOUT, echo=output.append)
    except TimeoutError as e:
        raise CheckFailed(f"{DDP_TESTS.name} did not finish within {DDP_TESTS_TIMEOUT} s") from e
    except LaunchError as e:
        lines = [line for line in output if line.strip()]
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        why = [line[1:].strip() for line in lines if line.startswith("E ")][:1]  # the first failure's error
        raise CheckFailed("; ".join(dict.fromkeys(failed + why + lines[-1:]))) from e  # names, why, summary
    left = [todo for line in output if line.startswith("SKIPPED") and (todo := blank.in_output(line))]
    if left:
        raise CheckFailed(blank.skipped(left[0]).removeprefix("TODO "))
    return output[-1]


def run_check(name: str, check: Callable[[], str]) -> CheckResult:
    """One row of the table: PASS with the check's summary, or FAIL with why."""
    try:
        return CheckResult(name, True, check())
    except CheckFailed as e:
        return CheckResult(name, False, str(e))
    except CheckWarning as e:
        return CheckResult(name, True, str(e), warning=True)
    except CheckSkipped as e:
        return CheckResult(name, True, str(e), skipped=True)
    except Exception as e:  # a checker bug or an input nobody foresaw: still a row, not a traceback
        return CheckResult(name, False, f"check crashed: {type(e).__name__}: {e}")


def check_artifacts(folder: Path) -> list[CheckResult]:
    """Conditions 1-4, on the experiment folder's files, and the repeats' disturbance (a warning at most);
    one result each."""
    folder = Path(folder)
    return [run_check("files", lambda: check_files(folder)),
            run_check("equivalence", lambda: check_equivalence(folder)),
            run_check("allreduce timing", lambda: check_timing(folder)),
            run_check("lesson notes", lambda: check_lesson_notes(folder)),
            run_check("quiet machine", lambda: check_disturbance(folder))]


def check_tests(run_tests: bool = True) -> CheckResult:
    """Condition 5, which reads no folder: the DDP tests' row (skipped unless `run_tests`)."""
    if run_tests:
        return run_check("ddp tests", check_ddp_tests)
    return CheckResult("ddp tests", True, "skipped (--skip-tests)", skipped=True)


def check_folder(folder: Path, run_tests: bool = True) -> list[CheckResult]:
    """Check the five stop conditions on an experiment folder; one result per condition."""
    return check_artifacts(folder) + [check_tests(run_tests)]


def completion(results: list[CheckResult]) -> str:
    """One line: the lab is complete, or which rows keep it from being so, or that no row run here failed and which
    were not run (notebook 01 leaves the DDP tests to `make lab`)."""
    failed = [f"{r.name} {r.status}" for r in results if not r.passed]
    skipped = [r.name for r in results if r.skipped]
    if failed:
        return f"not complete: {', '.join(failed + [f'{n} SKIPPED' for n in skipped])} (the full check: make lab)"
    if skipped:
        return f"no row run here fails; not run here: {', '.join(skipped)} (the full check: make lab)"
    return "lab complete"


def format_table(results: list[CheckResult], details: bool = True) -> str:
    """One line per condition: name, PASS/FAIL/SKIPPED, and (with `details`) what was found."""
    width = max(len(r.name) for r in results)
    return "\n".join(f"{r.name:<{width}}  {r.status:<7}  {r.detail if details else ''}".rstrip() for r in results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Check the lab's stop conditions on an experiment folder.")
    p.add_argument("folder", nargs="?", type=Path, default=EXPERIMENT_DIR)
    p.add_argument("--skip-tests", action="store_true", help="do not run tests/minitrain/test_ddp.py")
    args = p.parse_args(argv)
    results = check_folder(args.folder, run_tests=not args.skip_tests)
    print(f"checking {args.folder}")
    print(format_table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
