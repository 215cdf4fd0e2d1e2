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
from dataclasses import dataclass
from pathlib import Path

from minitrain.launch import LaunchError, run_streaming
from minitrain.paths import EXPERIMENT_DIR, REPO
from minitrain.timing import VARIANTS, manifest_fields, summarize
from minitrain.verify import ATOL, StateFileError, compare_state_files

DDP_TESTS = REPO / "tests" / "minitrain" / "test_ddp.py"
DDP_TESTS_TIMEOUT = 600  # seconds; they start real 2-process gloo runs, far longer than the other checks
FILES = ("train.py", "timings.jsonl", "scaling.png", "manifest.json", "state-rank-0.pt", "state-rank-1.pt")
RTOL = 1e-6  # manifest figures against the same figures recomputed here
TIMED = tuple(v.field for v in VARIANTS)  # timings.jsonl keys summarized in the manifest
# manifest field -> (timings.jsonl key, minitrain.timing.summarize statistic)
TIMING_FIELDS = {name: (v.field, stat) for v in VARIANTS for name, stat in manifest_fields(v).items()}
REQUIRED_FIELDS = ("lab", "seed", "backend", "world_size", "launcher", "model_params", "steps",
                   "warmup_steps", "run_ids", *TIMING_FIELDS, "tokens_per_sec_1proc", "tokens_per_sec_2proc",
                   "speedup_2proc", "speedup_2proc_range", "verdict", "repeats",
                   "allreduce_share_of_step", "threads_per_rank", "cores",
                   "byte_equivalent", "max_abs_diff", "bitwise_equal", "command", "lesson_notes")
PLACEHOLDER = re.compile(r"<[^<>]+>")  # "<filled in>", "<true/false>", ...
# The lesson paragraph's first sentence, as minitrain.lab.report.lesson_notes writes it. The groups
# are loose on purpose: a figure that differs is named, rather than the whole sentence rejected.
FIRST_SENTENCE = re.compile(
    r"On (?P<cores>\S+) logical CPUs, 2 processes trained at (?P<tokens_2proc>\S+) tokens/s against "
    r"(?P<tokens_1proc>\S+) for 1 process: (?P<speedup>\S+)x \(medians of (?P<repeats>\S+) alternating "
    r"repeats timed the same way; range (?P<low>[\d.]+)-(?P<high>[\d.]+)x\), so (?P<outcome>[^.]+)\.")
OUTCOMES = {"faster": "2 processes were faster here", "slower": "2 processes were slower here",
            "no clear winner": "there is no clear winner on this machine"}
SHARE = re.compile(r"took (\d+%) of a 2-process step")
THREADS = re.compile(r"on (\d+) thread\(s\) against the single process's (\d+)")


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str
    skipped: bool = False  # a skipped check is shown but is not a failure

    @property
    def status(self) -> str:
        return "SKIPPED" if self.skipped else "PASS" if self.passed else "FAIL"


class CheckFailed(Exception):
    """A condition does not hold; the message says exactly why."""


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_manifest(folder: Path) -> dict:
    """manifest.json as a dict, or CheckFailed saying why it cannot be read."""
    path = folder / "manifest.json"
    if not path.is_file():
        raise CheckFailed("manifest.json is missing")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckFailed(f"manifest.json is not valid JSON ({e})") from e
    if not isinstance(manifest, dict):
        raise CheckFailed("manifest.json does not hold a JSON object")
    return manifest


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
    """Condition 2: both ranks' states are allclose at atol 1e-5, and the manifest says so too."""
    try:
        result = compare_state_files(folder / "state-rank-0.pt", folder / "state-rank-1.pt")
    except StateFileError as e:
        raise CheckFailed(str(e)) from e
    problems = []
    if not result.allclose:
        worst = max(result.per_tensor, key=result.per_tensor.get)
        problems.append(f"the ranks' states differ: max |diff| {result.max_abs_diff:.3e} "
                        f"in {worst!r} (atol {ATOL:g})")
    manifest = load_manifest(folder)
    for key, found in (("byte_equivalent", result.allclose), ("bitwise_equal", result.bitwise_equal)):
        if manifest.get(key) is not found:
            problems.append(f"manifest {key} is {manifest.get(key)!r}, the state files say {found}")
    claimed = manifest.get("max_abs_diff")
    if not (is_number(claimed) and math.isclose(claimed, result.max_abs_diff, rel_tol=RTOL)):
        problems.append(f"manifest max_abs_diff is {claimed!r}, "
                        f"the state files say {result.max_abs_diff:.6g}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"allclose at atol {ATOL:g}, max |diff| {result.max_abs_diff:.3e}, "
            f"bitwise equal: {result.bitwise_equal}; the manifest agrees")


def check_timing(folder: Path) -> str:
    """Condition 3: the manifest's all-reduce statistics are filled in and match timings.jsonl."""
    manifest = load_manifest(folder)
    wrong = placeholders(manifest)  # field -> what is wrong with it, the first finding per field
    for key in REQUIRED_FIELDS:
        if manifest.get(key) is None:
            wrong.setdefault(key, "is missing" if key not in manifest else "is null")
    for key in TIMING_FIELDS:
        if not is_number(manifest.get(key)):
            wrong.setdefault(key, f"is {manifest[key]!r}, not a number")
    problems = [f"{key} {what}" for key, what in wrong.items()]
    steps, warmup = manifest.get("steps"), manifest.get("warmup_steps")
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
        if not math.isclose(manifest[field], value, rel_tol=RTOL):
            problems.append(f"{field} is {manifest[field]:.6g}, timings.jsonl gives {value:.6g}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"all-reduce p50 {manifest['allreduce_p50_ms']:.2f} ms, "
            f"p95 {manifest['allreduce_p95_ms']:.2f} ms; "
            f"matches timings.jsonl steps {warmup}-{steps - 1}")


def check_lesson_notes(folder: Path) -> str:
    """Condition 4: the lesson paragraph cites the manifest's own figures, and the right verdict."""
    m = load_manifest(folder)
    notes = m.get("lesson_notes")
    if not isinstance(notes, str) or not notes.strip():
        raise CheckFailed(f"lesson_notes is {notes!r}, not a paragraph")
    threads, repeats, spread = m.get("threads_per_rank"), m.get("repeats"), m.get("speedup_2proc_range")
    figures = {key: m.get(key) for key in ("tokens_per_sec_1proc", "tokens_per_sec_2proc",
                                            "speedup_2proc", "allreduce_share_of_step")}
    figures |= {f"threads_per_rank.{k}": threads.get(k) if isinstance(threads, dict) else None
                for k in ("1proc", "2proc")}
    speedups = repeats.get("speedups") if isinstance(repeats, dict) else None
    if not (isinstance(speedups, list) and speedups and all(map(is_number, speedups))):
        figures["repeats.speedups"] = None
    if not (isinstance(spread, list) and len(spread) == 2 and all(map(is_number, spread))):
        figures["speedup_2proc_range"] = None
    bad = [key for key, value in figures.items() if not is_number(value)]
    if bad:
        raise CheckFailed(f"manifest has no number for {', '.join(bad)}")
    speedup, share = m["speedup_2proc"], m["allreduce_share_of_step"]
    problems = []
    ratio = m["tokens_per_sec_2proc"] / m["tokens_per_sec_1proc"]
    if not math.isclose(speedup, ratio, rel_tol=RTOL):
        problems.append(f"speedup_2proc is {speedup:.6g}, tokens_per_sec_2proc / tokens_per_sec_1proc "
                        f"is {ratio:.6g}")
    if spread != [min(speedups), max(speedups)]:
        problems.append(f"speedup_2proc_range is {spread}, the repeats give {[min(speedups), max(speedups)]}")
    verdict = "faster" if min(speedups) > 1 else "slower" if max(speedups) < 1 else "no clear winner"
    if m.get("verdict") != verdict:
        problems.append(f"verdict is {m.get('verdict')!r}, the repeats' range {spread} gives {verdict!r}")
    first = FIRST_SENTENCE.match(notes.strip())
    if first is None:
        raise CheckFailed("; ".join(problems + [
            "the first sentence does not read 'On N logical CPUs, 2 processes trained at X tokens/s against Y "
            "for 1 process: Z.ZZx (medians of R alternating repeats timed the same way; range L-Hx), so "
            f"...': {notes.strip()[:90]!r}"]))
    expected = {"cores": str(m.get("cores")), "tokens_2proc": f"{m['tokens_per_sec_2proc']:,.0f}",
                "tokens_1proc": f"{m['tokens_per_sec_1proc']:,.0f}", "speedup": f"{speedup:.2f}",
                "repeats": str(len(speedups)), "low": f"{min(speedups):.2f}", "high": f"{max(speedups):.2f}",
                "outcome": OUTCOMES[verdict]}
    problems += [f"the paragraph cites {group} {first[group]!r}, the manifest gives {want!r}"
                 for group, want in expected.items() if first[group] != want]
    cited_share = SHARE.search(notes)
    if cited_share is None:
        problems.append("the paragraph does not cite the all-reduce share as 'took N% of a 2-process step'")
    elif cited_share[1] != f"{share:.0%}":
        problems.append(f"the paragraph cites an all-reduce share of {cited_share[1]}, "
                        f"the manifest gives {share:.0%}")
    cited_threads = THREADS.search(notes)
    want_threads = (str(threads["2proc"]), str(threads["1proc"]))
    if cited_threads is None:
        problems.append("the paragraph does not cite the threads per rank")
    elif cited_threads.groups() != want_threads:
        problems.append(f"the paragraph cites {'/'.join(cited_threads.groups())} threads (2proc/1proc), "
                        f"the manifest gives {'/'.join(want_threads)}")
    words = len(notes.split())
    if words > 180:
        problems.append(f"the paragraph has {words} words; the sheet asks for one paragraph (at most 180)")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (f"cites {speedup:.2f}x ({lo_hi(spread)}, {verdict}), all-reduce {share:.0%} of the step, "
            f"{words} words, matching the manifest")


def lo_hi(spread: list[float]) -> str:
    return f"repeats {spread[0]:.2f}-{spread[1]:.2f}x"


def check_ddp_tests() -> str:
    """Condition 5: tests/minitrain/test_ddp.py passes (run in a child pytest)."""
    output: list[str] = []
    try:
        run_streaming([sys.executable, "-m", "pytest", "-q", str(DDP_TESTS)],
                      timeout=DDP_TESTS_TIMEOUT, echo=output.append)
    except TimeoutError as e:
        raise CheckFailed(f"{DDP_TESTS.name} did not finish within {DDP_TESTS_TIMEOUT} s") from e
    except LaunchError as e:
        lines = [line for line in output if line.strip()]
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        raise CheckFailed("; ".join(dict.fromkeys(failed + lines[-1:]))) from e  # names, then summary
    return output[-1]


def run_check(name: str, check: Callable[[], str]) -> CheckResult:
    """One row of the table: PASS with the check's summary, or FAIL with why."""
    try:
        return CheckResult(name, True, check())
    except CheckFailed as e:
        return CheckResult(name, False, str(e))
    except Exception as e:  # a checker bug or an input nobody foresaw: still a row, not a traceback
        return CheckResult(name, False, f"check crashed: {type(e).__name__}: {e}")


def check_folder(folder: Path, run_tests: bool = True) -> list[CheckResult]:
    """Check the five stop conditions on an experiment folder; one result per condition."""
    folder = Path(folder)
    results = [run_check("files", lambda: check_files(folder)),
               run_check("equivalence", lambda: check_equivalence(folder)),
               run_check("allreduce timing", lambda: check_timing(folder)),
               run_check("lesson notes", lambda: check_lesson_notes(folder))]
    if run_tests:
        results.append(run_check("ddp tests", check_ddp_tests))
    else:
        results.append(CheckResult("ddp tests", True, "skipped (--skip-tests)", skipped=True))
    return results


def format_table(results: list[CheckResult]) -> str:
    """One line per condition: name, PASS/FAIL/SKIPPED, detail."""
    width = max(len(r.name) for r in results)
    return "\n".join(f"{r.name:<{width}}  {r.status:<7}  {r.detail}" for r in results)


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
