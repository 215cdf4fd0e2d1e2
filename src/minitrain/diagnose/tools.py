"""Run a broken run under one tool and read what the tool names (which rank, which collective, which line, which
shapes), with the seconds from the fault to that answer. A run is faults.py's KIND or a script of the exercise."""

import json
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from minitrain.diagnose.faults import KINDS
from minitrain.diagnose.inrank import OUT, TOOL
from minitrain.hang_report import HANG_LINE, MISMATCH_LINE, named_hang, named_mismatch
from minitrain.launch.stream import LaunchError
from minitrain.launch.warm import run_warm

TOOLS = ("none", "hang_report", "monitored_barrier", "detail", "flight_recorder", "faulthandler", "py-spy",
         "profiler", "detail_ddp")
ENV = {"detail": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
       "detail_ddp": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "PYTHONFAULTHANDLER": "1"},
       "flight_recorder": {"TORCH_FR_BUFFER_SIZE": "2000"}}  # torch 2.13's default, said out loud
MACHINE_PATHS = (str(Path(sys.executable).parents[1]), str(Path(__file__).resolve().parents[3]))  # venv, repository
RUN_LIMIT_S = 90.0  # a run still going then is stopped (every tool's own timeout is seconds)
DEFAULT_LINES = re.compile(r"Timed out waiting \d+ms|Connection (closed|reset) by peer|Received data size|"
                           r"error: the run failed")


@dataclass
class Outcome:
    """A broken run under a tool: its output lines with their arrival times, when its fault happened (the
    earliest rank's), and the tool's answer with the time it came."""
    target: str
    tool: str
    lines: list[tuple[float, str]] = field(default_factory=list)
    status: str = "finished"  # finished, failed (a rank exited non-zero), stopped (still going at the limit), not run
    fault_at: float | None = None
    answer: str | None = None
    answered_at: float | None = None

    @property
    def named(self) -> list[tuple[int | None, str | None]]:
        """The (rank, FILE:LINE) pairs the answer names (`named`)."""
        return named(self.answer)

    def names(self, rank: int | None, place: str) -> bool:
        """Whether the answer names rank `rank` at `place` (`faults.py:60`); rank None: any rank there."""
        return any(where == place and rank in (None, r) for r, where in self.named)

    @property
    def seconds(self) -> float | None:
        """From the fault to the answer; None without either."""
        if self.fault_at is None or self.answered_at is None:
            return None
        return max(0.0, self.answered_at - self.fault_at)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first(self, pattern: re.Pattern) -> tuple[float, str] | None:
        """The first output line matching `pattern`, with its arrival time."""
        return next(((t, line) for t, line in self.lines if pattern.search(line)), None)

    def tail(self, n: int = 6) -> str:
        """The last `n` lines a learner reads, torchrun's warnings and Python's caret lines left out."""
        kept = [line for _, line in self.lines  # torch's log lines, kineto's USDT lines, Python's carets: left out
                if line.strip() and not re.match(r"^([WIE]\d{4} |USDT:)|.*\^{3,}", line)]
        return "\n".join(line[:160] for line in kept[-n:])


PAIRS = re.compile(r"rank (?P<r1>\d+) at (?P<p1>\S+:\d+)|at (?P<p2>\S+:\d+) on rank (?P<r2>\d+)")
RANKS = re.compile(r"^\[rank(\d+)\]|^rank (\d+) (?:did not|arrives)|check rank (\d+)|rank (\d+) runs|"
                   r"missing ranks: \{(\d+)|Culprit rank (\d+)|^one dump, rank (\d+)'s")
PLACE = re.compile(r"; (\S+\.py:\d+)$")  # the Flight Recorder's answers end with the line
PY_SPY_MISSING = "py-spy not installed (pip install py-spy)"
ONE_DUMP = "one dump"  # how the Flight Recorder's answer from a single rank's dump begins


def named(answer: str | None) -> list[tuple[int | None, str | None]]:
    """The ranks and lines (`faults.py:60`) an answer of `run` names, read from its text: `rank 0 at LINE`, `at LINE
    on rank 0`; else the rank it points at (an error's `[rank1]`, `rank 1 arrives last`, `check rank 0's logs`,
    `missing ranks: {1}`, `Culprit rank 1` ...), with the line the Flight Recorder's answer ends with."""
    if not answer:
        return []
    pairs = [(int(m["r1"] or m["r2"]), m["p1"] or m["p2"]) for m in PAIRS.finditer(answer)]
    if pairs:
        return pairs
    place = PLACE.search(answer)
    place = place and place[1]
    ranks = [int(next(g for g in m.groups() if g)) for m in RANKS.finditer(answer)]
    return [(r, place) for r in ranks] or ([(None, place)] if place else [])


def run(target: str | Path, tool: str = "none", timeout_s: float = 2.0, folder: Path | None = None,
        nproc: int = 2) -> Outcome:
    """Run `target` (a KIND of faults.py, or a script's path) on `nproc` warm ranks (launch.warm: what torchrun's would
    print, sooner started) with `tool` on and the collective timeout `timeout_s`; read the tool's answer (without py-spy installed, "py-spy" runs nothing: PY_SPY_MISSING).
    `folder` keeps the tool's files and what the script writes there (a temporary one by default)."""
    if tool not in TOOLS:
        raise ValueError(f"tool {tool!r} is not one of {', '.join(TOOLS)}")
    if str(target) not in KINDS and not Path(target).is_file():
        raise FileNotFoundError(f"{target}: neither a broken run of faults.py ({', '.join(KINDS)}) nor a script; "
                                "the exercise's scripts: minitrain.diagnose.exercise.FOLDER / 'run_a.py'")
    if tool == "py-spy" and not py_spy():  # nothing to read it with: not run
        return Outcome(str(target), tool, status="not run", answer=PY_SPY_MISSING)
    with tempfile.TemporaryDirectory(prefix="minitrain-diagnose-") as tmp:
        out = Path(folder or tmp)
        out.mkdir(parents=True, exist_ok=True)
        module = str(target) in KINDS
        script, args = ("minitrain.diagnose.faults", [str(target), *(["--plain"] if tool == "detail" else [])]) \
            if module else (str(target), [])
        outcome = Outcome(str(target), tool)
        env = {TOOL: tool if tool in ("hang_report", "monitored_barrier", "flight_recorder", "faulthandler",
                                      "profiler") else "none",
               OUT: str(out), "MINITRAIN_COLLECTIVE_TIMEOUT": f"{timeout_s:g}", **ENV.get(tool, {})}
        spy = _PySpy(out, timeout_s / 4, _script(outcome)) if tool == "py-spy" else None
        if spy:
            spy.start()

        def echo(line: str) -> None:
            outcome.lines.append((time.time(), _scrub(line)))

        try:  # the ranks torchrun would start, forked warm: about 2 s of CPU less per rank
            run_warm(script, nproc, *args, module=module, env=env, timeout=RUN_LIMIT_S, echo=echo)
        except LaunchError:
            outcome.status = "failed"
        except TimeoutError:
            outcome.status = "stopped"
        finally:
            if spy:
                spy.stop.set()
                spy.join()
        faults = [float(p.read_text()) for p in out.glob("fault-rank-*.txt")]
        outcome.fault_at = min(faults) if faults else None
        READERS[tool](outcome, out)
    return outcome


def _scrub(line: str) -> str:
    """`line` without this machine's folders (the virtualenv's, the repository's): paths relative to them."""
    for folder in MACHINE_PATHS:
        line = line.replace(folder + "/", "")
    return line


def _from_output(outcome: Outcome, pattern: re.Pattern, name=lambda line: line.strip()) -> None:
    found = outcome.first(pattern)
    if found:
        outcome.answered_at, outcome.answer = found[0], name(found[1])


def read_default(outcome: Outcome, out: Path) -> None:
    """torch's own: the first error line (gloo's timeout, a closed connection, an abort)."""
    _from_output(outcome, DEFAULT_LINES, lambda line: line.strip()[:160])


def read_hang_report(outcome: Outcome, out: Path) -> None:
    """The lab's watch: `[rank R] hangs at FILE:LINE: waits in COLLECTIVE`, or its line for an abort."""
    found = outcome.first(re.compile(f"{HANG_LINE.pattern}|{MISMATCH_LINE.pattern}"))
    if found:
        outcome.answered_at = found[0]
        outcome.answer = named_hang(found[1]) or named_mismatch(found[1])


MONITORED = re.compile(r"Ranks? (?P<failed>[\d, ]+?) failed to pass monitoredBarrier in \d+ ms|"
                       r"Rank (?P<reached>\d+) successfully reached monitoredBarrier, but received errors while "
                       r"waiting for send/recv from rank (?P<peer>\d+)")


def read_monitored_barrier(outcome: Outcome, out: Path) -> None:
    """gloo's monitored barrier: rank 0 names the first rank that did not arrive; another rank says only that its
    exchange with rank 0 failed, and to check rank 0's logs."""
    _from_output(outcome, MONITORED, lambda line: _monitored(line, "the monitored barrier"))


def _monitored(line: str, what: str) -> str:
    """A monitored barrier's line in a few words: `rank 1 did not reach WHAT`, or another rank's `rank 1 reached
    WHAT; its exchange with rank 0 failed (check rank 0's logs)`."""
    found = MONITORED.search(line)
    if found["failed"]:
        return f"rank {found['failed']} did not reach {what}"
    return f"rank {found['reached']} reached {what}; its exchange with rank {found['peer']} failed (check rank " \
           f"{found['peer']}'s logs)"


OWN_PRINT = re.compile(r"^\[rank(\d+)\]: RuntimeError: Detected mismatch between collectives on ranks\. Rank (\d+) is "
                       r"running collective: CollectiveFingerPrint\((.*?)\), but Rank")


def fingerprint(text: str) -> str:
    """`ALLREDUCE [3]` from DETAIL's CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[3], ...)."""
    op = re.search(r"OpType=(\w+)", text)
    shape = re.search(r"TensorShape=(\[[^\]]*\])", text)
    return " ".join(filter(None, [op and op[1], shape and shape[1]]))


def read_detail(outcome: Outcome, out: Path) -> None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: `rank 0 runs ALLREDUCE [3]; rank 1 runs ALLREDUCE [5]`, each from the rank's
    own "Rank R is running" (the other rank's fingerprint in a message is decoded from gathered bytes, and can
    come out wrong: a length read as an op); or the monitored barrier it runs first, naming a rank that did not
    arrive."""
    own = {}
    for at, line in outcome.lines:
        found = OWN_PRINT.search(line)
        if found and found[1] == found[2] and found[1] not in own:
            own[found[1]] = (at, f"rank {found[1]} runs {fingerprint(found[3])}")
    if own:
        outcome.answered_at = max(at for at, _ in own.values())
        outcome.answer = "; ".join(text for _, text in sorted(own.values(), key=lambda v: v[1]))
        return
    _from_output(outcome, MONITORED, lambda line: _monitored(line, "DETAIL's check"))


SEGFAULT = re.compile(r'File "(\S*torch/nn/parallel/distributed\.py)", line (\d+) in (\w+)')


def read_detail_ddp(outcome: Outcome, out: Path) -> None:
    """DETAIL with DDP: in torch 2.13 each rank dies (SIGSEGV) constructing DDP; faulthandler names the line."""
    _from_output(outcome, SEGFAULT, lambda line: "SIGSEGV in DistributedDataParallel() at "
                 "distributed.py:{1} in {2}".format(*SEGFAULT.search(line).groups()))
    if outcome.answer is None:  # under load a rank can be ended before its stack reaches the output
        _from_output(outcome, re.compile(r"killed by SIGSEGV"), lambda line: "SIGSEGV in a rank (no stack printed)")


def read_flight_recorder(outcome: Outcome, out: Path) -> None:
    """The ranks' dumps read by torchfrtrace (the group's name filled in first: fr_copies): its first finding. With
    one rank's dump only (the other died first), that rank's last collective, read from the dump itself."""
    dumps = sorted(out.glob("fr-rank-*"))
    if len(dumps) == 1:
        return _one_dump(outcome, dumps[0])
    if len(dumps) < 2:
        return
    report = torchfrtrace(fr_copies(dumps, out / "fr"))
    found = re.search(r"^(Not all ranks joining collective|Collective sequence number: \d+ has errors).*$", report,
                      re.M)
    if not found:
        return
    block = report[found.start():].split("\n\n")[0]
    detail = re.search(r"^(missing ranks: .*|error msg: .*)$", block, re.M)
    what = re.search(r"^collective: (.*)$", block, re.M)
    sizes = re.search(r"^input sizes: (.*)$", block, re.M)
    where = re.search(rf"^(\w+) at \S*?({re.escape(_script(outcome))}):(\d+)$", block, re.M)
    outcome.answered_at = time.time()
    outcome.answer = "; ".join(filter(None, [found[1], detail and detail[1], what and what[1],
                                             sizes and f"sizes {sizes[1]}", where and f"{where[2]}:{where[3]}"]))


def _one_dump(outcome: Outcome, path: Path) -> None:
    """`one dump, rank 1's (no other rank wrote one): its last collective gloo:all_reduce, sizes [[15328]],
    faults.py:49` (torchfrtrace compares ranks: it stops at a missing dump)."""
    rank = int(path.name.rsplit("-", 1)[1])
    entries = pickle.loads(path.read_bytes())["entries"]
    if not entries:
        return
    last = entries[-1]
    frame = next((f for f in last["frames"] if Path(f["filename"]).name == _script(outcome)), None)
    where = frame and f"{_script(outcome)}:{frame['line']}"
    outcome.answered_at = path.stat().st_mtime
    outcome.answer = "; ".join(filter(None, [f"{ONE_DUMP}, rank {rank}'s (no other rank wrote one)",
                                             f"its last collective {last['profiling_name']}",
                                             f"sizes {last['input_sizes']}", where]))


def _script(outcome: Outcome) -> str:
    return "faults.py" if outcome.target in KINDS else Path(outcome.target).name


def fr_copies(dumps: list[Path], folder: Path) -> Path:
    """Copies of gloo's Flight Recorder dumps that torchfrtrace can read: torch 2.13's gloo dump names its group ""
    in `pg_config` while its entries say "0", and torchfrtrace stops with KeyError ('0', 0) (test_diagnose)."""
    folder.mkdir(exist_ok=True)
    for path in dumps:
        dump = pickle.loads(path.read_bytes())
        ranks = next(iter(dump["pg_config"].values()))["ranks"]
        dump["pg_config"] = {name: {"name": name, "desc": desc, "ranks": ranks}
                             for name, desc in {tuple(e["process_group"]) for e in dump["entries"]}}
        (folder / f"rank_{path.name.rsplit('-', 1)[1]}").write_bytes(pickle.dumps(dump))
    return folder


def torchfrtrace(folder: Path, prefix: str = "rank_") -> str:
    """The `torchfrtrace` command torch installs, on the dumps in `folder` (named PREFIX + rank): its output."""
    command = [str(Path(sys.executable).with_name("torchfrtrace")), str(folder), "-p", prefix]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return proc.stdout + proc.stderr


def read_faulthandler(outcome: Outcome, out: Path) -> None:
    """faulthandler's stacks: each rank's innermost line in the script, `rank 0 at faults.py:71 in train`."""
    line = re.compile(rf'File "[^"]*(?P<file>{re.escape(_script(outcome))})", line (?P<line>\d+) in (?P<fn>\w+)')
    _from_files(outcome, out.glob("stacks-rank-*.txt"), line)


def _from_files(outcome: Outcome, paths, line: re.Pattern) -> None:
    """Each rank's file's first match of `line` (groups file, line, fn): `rank 0 at faults.py:59 in train`."""
    found = []
    for path in sorted(paths):
        where = line.search(path.read_text())  # the innermost frame comes first in both tools' stacks
        if where:
            rank = path.stem.rsplit("-", 1)[1]
            found.append((path.stat().st_mtime, f"rank {rank} at {where['file']}:{where['line']} in {where['fn']}"))
    if found:
        outcome.answered_at = max(t for t, _ in found)
        outcome.answer = "; ".join(text for _, text in found)


def py_spy() -> str | None:
    """The py-spy command, from this interpreter's environment or PATH; None where it is not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class _PySpy(threading.Thread):
    """`py-spy dump` of each rank from outside, every `every_s` from the ranks' start until the run ends: each
    rank's last dump still in `script` is kept (a hang: where it waits; an abort: its last moment caught)."""

    def __init__(self, out: Path, every_s: float, script: str) -> None:
        super().__init__(daemon=True)
        self.out, self.every_s, self.script, self.stop = out, every_s, script, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            for path in sorted(self.out.glob("pid-rank-*.txt")):
                rank = path.stem.rsplit("-", 1)[1]
                try:
                    proc = subprocess.run([py_spy(), "dump", "--pid", path.read_text().strip()], capture_output=True,
                                          text=True, timeout=30)
                except subprocess.TimeoutExpired:
                    continue
                if proc.returncode == 0 and f"{self.script}:" in proc.stdout:  # else gone, or exiting: the last stays
                    (self.out / f"py-spy-rank-{rank}.txt").write_text(proc.stdout)


def read_py_spy(outcome: Outcome, out: Path) -> None:
    """py-spy's dumps: each rank's innermost line in the script, on its main thread."""
    line = re.compile(rf"(?P<fn>\w+) \([^()]*?(?P<file>{re.escape(_script(outcome))}):(?P<line>\d+)\)")
    _from_files(outcome, out.glob("py-spy-rank-*.txt"), line)


def read_profiler(outcome: Outcome, out: Path) -> None:
    """Each rank's time in gloo's all-reduce (the profiler's summary): the rank that waits less is the late one."""
    times = {int(p.stem.rsplit("-", 1)[1]): json.loads(p.read_text()) for p in out.glob("profile-rank-*.json")}
    if len(times) < 2:
        return
    late = min(times, key=lambda r: times[r]["allreduce_ms"])
    spent = ", ".join(f"rank {r} {t['allreduce_ms']:.0f} ms" for r, t in sorted(times.items()))
    outcome.answered_at = max(p.stat().st_mtime for p in out.glob("profile-rank-*.json"))
    outcome.answer = f"rank {late} arrives last: time in gloo:all_reduce over {times[late]['calls']} calls: {spent}"


READERS = {"none": read_default, "hang_report": read_hang_report, "monitored_barrier": read_monitored_barrier,
           "detail": read_detail, "flight_recorder": read_flight_recorder, "faulthandler": read_faulthandler,
           "py-spy": read_py_spy, "profiler": read_profiler, "detail_ddp": read_detail_ddp}
