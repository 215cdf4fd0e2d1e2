"""Graders for the lab's TODOs: each runs the learner's code for real, and teaches.

The exercises' graders are called from a locked nbgrader test cell, right after the learner's
solution cell; `python -m minitrain.lab.grade` calls them all, and those of the sheet's files:

    grade_shard_indices(shard_indices, corpus_dir)          02-sharding: the sheet's sharding rule
    grade_rank1_holds_rank0_init(fn, wrapdemo_folder)       03-wrapping: did DDP broadcast rank 0's weights?
    grade_timing_hook(my_timing_hook)                       04-launch-and-timing: a comm hook, at 3 and 2 processes
    grade_states_equivalent(states_equivalent, real=(a, b)) 05-verification and compare_states.py: Block E
    grade_make_shard(make_shard, corpus_dir)                data.py: Block B's split
    grade_check_shards(check_shards)                        data.py: Block B's checks, in 3 gloo processes
    grade_barrier_timer(BarrierTimer)                       timing.py: Block D variant A, in 2 gloo processes

A grader returns its verdict when every check passes. Otherwise it raises `ExerciseError`, an
AssertionError (so nbgrader counts the cell as failed), whose message holds "not done yet" for
the student edition's stub (`raise NotImplementedError("not done yet: <what>")`), or names the
common mistake it recognized ("contiguous split: ...", "no division by the world size: ...").
The graders that start processes join their own process group (`join_group`): the tree being
graded may hold a blank or wrong Block A.

The hook runs in spawned processes, which cannot unpickle a function defined in a notebook's
`__main__`: the grader writes the hook's source (`inspect.getsource`), after one import line for
each module or name it uses, to a module in a temporary folder, and each worker loads it from there.
check_shards and BarrierTimer come from modules, which the workers import by name.
"""

import dis
import importlib.util
import inspect
import json
import math
import os
import shutil
import tempfile
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from minitrain.data import SEED_BASE, load_corpus
from minitrain.gloo_setup import collective_timeout, loopback_interface, use_libuv
from minitrain.hang_report import watched_group_timeout
from minitrain.lab.wrapdemo import state_path
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.parent_watch import exit_with_parent
from minitrain.verify import ATOL, compare_states, load_state


class ExerciseError(AssertionError):
    """The learner's function is blank or wrong; the message says which, and what to change."""


def _call(fn: Callable, shown: str, *args):
    """fn(*args), with the learner's exceptions turned into a message; `shown` names the call."""
    try:
        return fn(*args)
    except NotImplementedError as e:
        raise ExerciseError(f"not done yet: {fn.__name__} still raises NotImplementedError; replace "
                            "`# YOUR CODE HERE` and the `raise` under it with your code") from e
    except Exception as e:
        raise ExerciseError(f"{shown} raised {type(e).__name__}: {e}") from e


def _keys_checked(call: Callable[[], object], shown: str):
    """call(), with a KeyError from the learner's code named as the key mistake it is."""
    try:
        return call()
    except ExerciseError as e:
        if isinstance(e.__cause__, KeyError):
            raise ExerciseError(f"wrong keys: {shown} raised KeyError {e.__cause__}; compare the key sets "
                                "first (a.keys() == b.keys())") from e
        raise


def join_group() -> tuple[int, int]:
    """Join spawn_workers' process group as init_distributed does, without the learner's code (which
    may be blank or wrong in the tree being graded), a collective waiting longer than collective_timeout()
    ending the rank with the line where it waits (hang_report); return (rank, world_size)."""
    timeout = collective_timeout()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    exit_with_parent(f"grader rank {rank}")  # a grader stopped outright must not leave its workers
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=False, timeout=timeout, use_libuv=use_libuv())
    dist.init_process_group("gloo", store=dist.PrefixStore("default_pg", store), rank=rank,
                            world_size=world_size, timeout=watched_group_timeout(rank, timeout))
    return rank, world_size


# ------------------------------------------------------------------------------------------------
# 02-sharding: shard_indices(num_sentences, rank, world_size) -> list[int]

SHARD_CASES = [(10, 2), (11, 2), (24000, 2), (10, 3), (11, 3), (7, 3), (5, 1), (9, 4)]


def _is_block(indices: list[int]) -> bool:
    return len(indices) > 1 and indices == list(range(indices[0], indices[0] + len(indices)))


def _called(fn: Callable, n: int, r: int, w: int) -> str:
    """How a call of a sharding rule reads in a message: `fn.called(n, r, w)` where the rule has one."""
    return fn.called(n, r, w) if hasattr(fn, "called") else f"{fn.__name__}({n}, {r}, {w})"


def grade_shard_indices(fn: Callable[[int, int, int], list[int]], corpus_dir: Path | None = None,
                        cases: list[tuple[int, int]] = SHARD_CASES) -> str:
    """Every rank of every (sentences, world size) case gets `index % world_size == rank`, in corpus
    order; with `corpus_dir`, the indices also pick the rule's sentences of the real corpus."""
    got = {}
    for n, w in cases:
        for r in range(w):
            result = _call(fn, _called(fn, n, r, w), n, r, w)
            if not isinstance(result, (list, tuple, range)) or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in result):
                raise ExerciseError(f"{_called(fn, n, r, w)} returned {result!r:.80}: return a "
                                    "list of sentence indices (ints)")
            got[n, r, w] = list(result)
    wrong = [(n, r, w) for (n, r, w), indices in got.items() if indices != list(range(r, n, w))]
    if not wrong:
        return _shard_verdict(fn, corpus_dir, len(cases))
    n, r, w = wrong[0]
    mine, expected = got[n, r, w], list(range(r, n, w))
    blocks = [(n, r, w) for n, r, w in wrong if w > 1 and all(_is_block(got[n, q, w]) for q in range(w))]
    if blocks:  # every rank of a case got one run of consecutive indices
        n, r, w = blocks[0]
        mine = got[n, r, w]
        raise ExerciseError(
            f"contiguous split: {_called(fn, n, r, w)} gave rank {r} sentences {mine[0]}..{mine[-1]} in "
            f"one block; the sheet's rule is index % world_size == rank, so rank {r} of {w} gets "
            f"{', '.join(map(str, range(r, min(n, r + 3 * w), w)))}, ... (one sentence in every {w})")
    if all(got[n, r, w] in ([i for i in range(n) if i % 2 == r], list(range(r, n, 2)))  # 2 hard-coded
           for n, r, w in wrong):
        raise ExerciseError(f"world_size ignored: right for 2 ranks, wrong for {w}: {_called(fn, n, r, w)} "
                            f"returned {mine[:8]}..., expected {expected[:8]}...; use the world_size argument")
    owners: dict[int, list[int]] = {}
    for rank in range(w):
        for i in got[n, rank, w]:
            owners.setdefault(i, []).append(rank)
    shared = sorted(i for i, ranks in owners.items() if len(ranks) > 1)
    if shared:
        raise ExerciseError(f"overlap: with {n} sentences and {w} ranks, sentence {shared[0]} is in the shards "
                            f"of ranks {owners[shared[0]]}; each sentence must go to exactly one rank")
    missing = sorted(set(range(n)) - owners.keys())
    if missing:
        raise ExerciseError(f"sentences missing: with {n} sentences and {w} ranks, sentence(s) {missing[:5]} "
                            "are in no shard; every sentence must go to some rank (full coverage)")
    if sorted(mine) == expected:
        raise ExerciseError(f"not in corpus order: {_called(fn, n, r, w)} returned the right indices in "
                            f"another order ({mine[:6]}...); return them ascending, as the corpus lists them")
    raise ExerciseError(f"{_called(fn, n, r, w)} returned {mine[:8]}{'...' if len(mine) > 8 else ''}, "
                        f"expected {expected[:8]}{'...' if len(expected) > 8 else ''} (index % world_size == rank)")


def _shard_verdict(fn: Callable, corpus_dir: Path | None, cases: int) -> str:
    verdict = f"{fn.__name__}: correct on {cases} corpus sizes and world sizes, every rank"
    if corpus_dir is None:
        return verdict
    corpus = load_corpus(Path(corpus_dir) / "train.jsonl")
    for w in (2, 3):
        for r in range(w):
            if [corpus[i] for i in fn(len(corpus), r, w)] != corpus[r::w]:
                raise ExerciseError(f"on the real corpus, {fn.__name__}({len(corpus)}, {r}, {w}) picks other "
                                    "sentences than the rule index % world_size == rank")
    return verdict + (f"; on the real corpus ({len(corpus)} sentences) it picks the sheet's sentences for 2 "
                      "and 3 ranks")


# ------------------------------------------------------------------------------------------------
# Block B (src/minitrain/data.py): make_shard's split, and check_shards in real gloo processes

MAKE_SHARD_CASES = [(10, 2), (11, 2), (10, 3), (11, 3), (7, 3), (5, 1), (9, 4)]
CHECK_SHARDS_WORLD = 3  # ranks of check_shards' run: a hard-coded 2 shows


def grade_make_shard(make_shard: Callable, corpus_dir: Path) -> str:
    """make_shard(rank, world_size, corpus) on small corpora cut from `corpus_dir` (its first
    distinct sentences), graded as shard_indices: which corpus indices did each rank get?"""
    corpus = list(dict.fromkeys(load_corpus(Path(corpus_dir) / "train.jsonl")))
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        def make_shard_indices(n: int, rank: int, world_size: int) -> list[int]:
            folder = Path(tmp) / f"corpus-{n}"
            if not folder.is_dir():
                folder.mkdir()
                (folder / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus[:n]))
                shutil.copy(Path(corpus_dir) / "vocab.json", folder / "vocab.json")
            index = {text: i for i, text in enumerate(corpus[:n])}
            try:
                return [index[text] for text in make_shard(rank, world_size, folder).sentences]
            except ValueError as e:  # CorpusError: make_shard's own check after the split, the split gave nothing
                if "empty shard" in str(e):
                    return []
                raise
        make_shard_indices.called = lambda n, r, w: f"make_shard({r}, {w}) on a {n}-sentence corpus"
        make_shard_indices.__name__ = "make_shard"
        return "Block B, " + grade_shard_indices(make_shard_indices, None, MAKE_SHARD_CASES)


SHARD_SCENARIOS = {  # name -> (each rank's (sentence count, first sentence), the corpus total)
    "right": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "birds sing")], 11),
    "counts off": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "birds sing")], 12),
    "same first": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "a dog runs")], 11),
}


def _leave(folder: str, rank: int, results: dict) -> None:
    """A grader rank's end: its results saved for the grader, then every rank leaves the group together."""
    (Path(folder) / f"rank-{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def _check_shards_rank(folder: str, check_shards: Callable) -> None:
    """One rank of check_shards' run: every scenario in turn, its result or error saved per rank."""
    rank = int(os.environ["RANK"])
    _silence(Path(folder) / f"rank-{rank}.log")
    _, world_size = join_group()
    results = {}
    for name, (reports, total) in SHARD_SCENARIOS.items():
        count, first = reports[rank]
        print(f"--- scenario {name}", flush=True)
        try:
            results[name] = ("returned", repr(check_shards(types.SimpleNamespace(
                num_sentences=count, first_sentence=first, sentences=[first] * count), rank, world_size, total)))
        except NotImplementedError as e:
            results[name] = ("blank", str(e))
        except Exception as e:
            results[name] = ("raised", f"{type(e).__name__}: {e}")
    _leave(folder, rank, results)


def grade_check_shards(check_shards: Callable) -> str:
    """`check_shards` (a module's function: the workers import it) in a real gloo run of 3 ranks, on
    shards that add up, shards whose counts do not, and two ranks with the same first sentence."""
    try:  # a blank stub says so at once, before any process starts
        check_shards(types.SimpleNamespace(num_sentences=1, first_sentence="a", sentences=["a"]), 0, 1, 1)
    except NotImplementedError as e:
        raise ExerciseError(f"{e}: check_shards still raises NotImplementedError") from e
    except Exception:
        pass  # no process group here: the real run below says what is wrong
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        try:
            spawn_workers(_check_shards_rank, CHECK_SHARDS_WORLD, str(folder), check_shards, start_method=fast_start_method())
        except Exception as e:
            raise ExerciseError(f"the {CHECK_SHARDS_WORLD}-process run of check_shards failed ({type(e).__name__}: "
                                f"{str(e).strip().splitlines()[-1]}); its ranks' output:\n{_log_tails(folder)}") from e
        ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(CHECK_SHARDS_WORLD)]
        logs = [(folder / f"rank-{r}.log").read_text(errors="replace").split("--- scenario ")
                for r in range(CHECK_SHARDS_WORLD)]
    if any(kind == "blank" for rank in ranks for kind, _ in rank.values()):
        blank = next(detail for rank in ranks for kind, detail in rank.values() if kind == "blank")
        raise ExerciseError(f"{blank}: check_shards still raises NotImplementedError")
    reports, total = SHARD_SCENARIOS["right"]
    for rank, result in enumerate(ranks):
        kind, detail = result["right"]
        if kind == "raised":
            raise ExerciseError(f"check_shards raised {detail} on rank {rank} for right shards ({reports}, corpus "
                                f"{total}); with {CHECK_SHARDS_WORLD} ranks, gather one report from each")
        expected = repr({"shard_sentences": [c for c, _ in reports], "first_sentences": [f for _, f in reports]})
        if detail != expected:
            raise ExerciseError(f"check_shards returned {detail:.120} on rank {rank}, expected {expected} "
                                "(every rank's counts and first sentences, gathered in rank order)")
        log = next(part for part in logs[rank] if part.startswith("right"))
        if reports[rank][1] not in log or str(reports[rank][0]) not in log:
            raise ExerciseError(f"first sentence not logged: rank {rank}'s output does not show its shard's size "
                                f"({reports[rank][0]}) and first sentence ({reports[rank][1]!r}); print both, on every rank")
    for name, mistake in (("counts off", "counts not checked: shards of 4 + 4 + 3 sentences passed for a corpus of 12; "
                                         "check that the ranks' counts add up to corpus_total"),
                          ("same first", "first sentences not compared: ranks 1 and 2 both start with 'a dog runs' and "
                                         "check_shards passed; the first sentences must all differ")):
        raised = [kind == "raised" for kind, _ in (rank[name] for rank in ranks)]
        if not any(raised):
            raise ExerciseError(mistake)
        if not all(raised):
            raise ExerciseError(f"checked on some ranks only: with {name!r} shards, ranks "
                                f"{[r for r, x in enumerate(raised) if not x]} went on as if nothing were wrong; "
                                "gather every rank's report on every rank (all_gather_object) and raise on all")
    return (f"Block B, check_shards: correct in a real {CHECK_SHARDS_WORLD}-rank gloo run: right shards pass with "
            "every rank's counts and first sentences, logged on each rank; counts that do not add up and two "
            "equal first sentences raise on every rank")


# ------------------------------------------------------------------------------------------------
# 03-wrapping: rank1_holds_rank0_init(before_rank0, after_rank1) -> bool


def _expect_bool(fn: Callable, a: dict, b: dict, shown: str) -> bool:
    result = _call(fn, f"{fn.__name__}({shown})", a, b)
    if not isinstance(result, bool):
        hint = " (a tensor: use torch.equal, which returns a bool)" if isinstance(result, torch.Tensor) else ""
        raise ExerciseError(f"{fn.__name__} returned {type(result).__name__}{hint}: return True or False")
    return result


def grade_rank1_holds_rank0_init(fn: Callable[[dict, dict], bool], folder: Path) -> str:
    """True for the real pair (rank 0 before wrapping, rank 1 after), False for rank 1's own init,
    and right on pairs that catch a tolerance, a partial comparison and key mistakes."""
    before0, after1 = load_state(state_path(folder, "before", 0)), load_state(state_path(folder, "after", 1))
    before1 = load_state(state_path(folder, "before", 1))
    if not _expect_bool(fn, before0, after1, "before_rank0, after_rank1"):
        raise ExerciseError(f"{fn.__name__} says rank 1 does not hold rank 0's initial weights after wrapping, "
                            "but it does, bit for bit (DDP's constructor broadcast them)")
    if _expect_bool(fn, before0, before1, "before_rank0, before_rank1"):
        raise ExerciseError(f"{fn.__name__} says rank 1's own initial weights (seed {SEED_BASE + 1}) equal "
                            f"rank 0's (seed {SEED_BASE}); they differ in every randomly initialized matrix")
    name = next(k for k, v in after1.items() if v.is_floating_point() and v.numel())
    nudged = dict(after1)
    nudged[name] = after1[name].clone()
    nudged[name].view(-1)[0] = torch.nextafter(nudged[name].view(-1)[0], torch.tensor(math.inf))
    if _expect_bool(fn, before0, nudged, "a pair one float step apart"):
        raise ExerciseError(f"tolerance instead of bit for bit: a copy whose {name!r}[0] is one float step "
                            f"({(nudged[name].view(-1)[0] - after1[name].view(-1)[0]).item():.1e}) away passed; "
                            "the broadcast copies the bytes, so compare with torch.equal, not allclose")
    for name in after1:
        changed = dict(after1)
        changed[name] = after1[name] + 1
        if _expect_bool(fn, before0, changed, f"a pair that differs only in {name!r}"):
            raise ExerciseError(f"not every tensor compared: a copy that differs only in {name!r} passed; "
                                f"compare all {len(after1)} tensors")
    reordered = dict(reversed(after1.items()))
    if not _expect_bool(fn, before0, reordered, "the same tensors in another key order"):
        raise ExerciseError("compared by position: the same tensors with the keys in another order failed; "
                            "match the tensors by name (a state dict is a mapping, not a list)")
    for shown, other in (("a copy missing the last tensor", dict(list(after1.items())[:-1])),
                         ("a copy with an extra tensor", {**after1, "extra.weight": torch.zeros(1)})):
        if _keys_checked(lambda: _expect_bool(fn, before0, other, shown), shown):
            raise ExerciseError(f"wrong keys: {shown} passed; check that both state dicts hold the same names")
    prefixed = {f"module.{k}": v for k, v in after1.items()}
    if _keys_checked(lambda: _expect_bool(fn, before0, prefixed, "a copy with `module.` keys"), "module. keys"):
        raise ExerciseError("only the common keys compared: against the same tensors under `module.`-prefixed names "
                            "(a DDP-wrapped model's state_dict) no name is shared, nothing was compared, and it "
                            "passed; the key sets must be equal, not just overlap")
    return (f"{fn.__name__}: correct. Rank 1 after wrapping holds rank 0's initial weights, all "
            f"{len(after1)} tensors bit for bit; rank 1's own initial weights do not; and the check catches "
            "one float step, any single tensor, and different key sets")


# ------------------------------------------------------------------------------------------------
# 04-launch-and-timing: my_timing_hook(state, bucket) -> torch.futures.Future

WORLD_SIZES = (3, 2)  # 3 first: a hard-coded 2 shows there
WAIT_S = 0.3  # rank 1 sleeps this long before backward: rank 0's all-reduce waits for it
GRAD_ATOL = 1e-10  # float64: only the summation order differs from one process on the whole batch
HOOK_MODULE = "learner_hook"


def _tiny_model() -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):  # leaves the caller's random state alone
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)  # 12 rows: equal halves and thirds
    return torch.randn(12, 6, generator=g, dtype=torch.float64), torch.randn(12, 3, generator=g, dtype=torch.float64)


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _reference_gradients() -> dict[str, torch.Tensor]:
    """One process, the whole batch: what DDP's averaged gradients must equal."""
    model = _tiny_model()
    inputs, targets = _batch()
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    return _gradients(model)


def _global_names(code: types.CodeType) -> set[str]:
    """Names a function (and the functions inside it) looks up in its module's globals."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def hook_module_source(fn: Callable) -> str:
    """A module that defines `fn` as the learner wrote it, for processes that never ran the notebook:
    one line per global it uses (a module, a name imported from a module, a literal), then its source."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ExerciseError(f"cannot read the source of {fn!r} ({e}): define it with `def` in a cell") from e
    lines = []
    for name in sorted(_global_names(fn.__code__) - {fn.__name__}):
        if name not in fn.__globals__:
            continue  # a builtin (or a NameError the run reports)
        value = fn.__globals__[name]
        origin = getattr(value, "__module__", None)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif isinstance(value, (bool, int, float, str)):
            lines.append(f"{name} = {value!r}")
        elif origin not in (None, "__main__") and getattr(value, "__qualname__", ".").isidentifier():
            lines.append(f"from {origin} import {value.__qualname__} as {name}")
        else:
            raise ExerciseError(f"{fn.__name__} uses `{name}`, defined in this notebook: the grader runs your hook "
                                "in 2 new processes, which get only the hook's own source and what it imports; "
                                f"move `{name}` inside the hook, or import it from a module")
    header = "# written by minitrain.lab.graders: the learner's hook, for the grader's worker processes"
    return "\n".join(["from __future__ import annotations", header, *lines, "", "", source])


def _completed(tensor: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def _guarded(hook: Callable, problems: list) -> Callable:
    """The learner's hook, with what would crash DDP (an exception, no future, a list-valued future)
    noted in `problems` and replaced by the bucket's own tensor, so that the run ends and reports."""
    def guarded(state, bucket):
        called = time.perf_counter()
        try:
            fut = hook(state, bucket)
        except NotImplementedError:
            problems.append(("blank", ""))
            return _completed(bucket.buffer())
        except Exception as e:
            problems.append(("raised", f"{type(e).__name__}: {e}"))
            return _completed(bucket.buffer())
        if not isinstance(fut, torch._C.Future):  # torch.futures.Future's base; get_future() returns one
            problems.append(("returned", type(fut).__name__))
            return _completed(bucket.buffer())
        problems.append(("call took", time.perf_counter() - called))  # a hook that blocks takes the peer's lateness

        def value(f: torch.futures.Future) -> torch.Tensor:
            try:
                result = f.value()
            except Exception as e:
                problems.append(("callback raised", str(e).strip().splitlines()[-1][:300]))
                return bucket.buffer()
            if isinstance(result, (list, tuple)):
                problems.append(("list", ""))
                return result[0]
            return result

        return fut.then(value)
    return guarded


def _silence(log: Path) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to `log`: a notebook cell shows
    a child's raw output in Jupyter but not under nbval, so the workers must print nothing there."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _hook_rank(folder: str, fn_name: str) -> None:
    """One rank of the grader's run: wrap the tiny model, register the learner's hook, take this
    rank's half of the batch, make rank 1 late for backward, and save gradients and what was recorded."""
    folder = Path(folder)
    rank = int(os.environ["RANK"])
    _silence(folder / f"rank-{rank}.log")
    rank, world_size = join_group()
    spec = importlib.util.spec_from_file_location(HOOK_MODULE, folder / f"{HOOK_MODULE}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recorded: list = []
    problems: list = []
    model = DistributedDataParallel(_tiny_model())
    model.register_comm_hook(recorded, _guarded(getattr(module, fn_name), problems))
    inputs, targets = (t.chunk(world_size)[rank] for t in _batch())
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    dist.barrier()  # every rank starts from here
    if rank == 1:
        time.sleep(WAIT_S)
    start = time.perf_counter()
    loss.backward()
    backward_s = time.perf_counter() - start
    torch.save({"grads": _gradients(model.module), "backward_s": backward_s, "problems": problems,
                "recorded": [v if isinstance(v, float) else float(v) if isinstance(v, int) else repr(v)[:80]
                             for v in recorded]},
               folder / f"rank-{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _max_diff(a: dict, b: dict, scale: float = 1.0) -> float:
    return max((a[k] - scale * b[k]).abs().max().item() for k in a)


def _log_tails(folder: Path) -> str:
    tails = [f"--- rank {p.stem.split('-')[-1]}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
             for p in sorted(folder.glob("rank-*.log"))]
    return "\n".join(tails)


def _run_hook(fn: Callable, source: str, world_size: int) -> list[dict]:
    """Each rank's record of one real run of `fn` (from `source`) as the comm hook, at `world_size`."""
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        (folder / f"{HOOK_MODULE}.py").write_text(source)
        try:
            spawn_workers(_hook_rank, world_size, str(folder), fn.__name__, start_method=fast_start_method())
        except Exception as e:
            raise ExerciseError(f"the {world_size}-process run with {fn.__name__} failed ({type(e).__name__}: "
                                f"{str(e).strip().splitlines()[-1]}); its ranks' output:\n{_log_tails(folder)}") from e
        return [torch.load(folder / f"rank-{r}.pt", weights_only=True) for r in range(world_size)]


def grade_timing_hook(fn: Callable) -> str:
    """Run `fn` as the comm hook of real gloo DDP runs at 3 and 2 processes (a tiny float64 model,
    one step, rank 1 late by WAIT_S), then check the gradients against one process on the whole
    batch, that the hook returned at once, and the recorded seconds against rank 0's wait."""
    source = hook_module_source(fn)
    try:  # a blank stub says so at once, before any process starts
        fn([], types.SimpleNamespace(buffer=lambda: torch.zeros(1), index=lambda: 0, parameters=lambda: []))
    except NotImplementedError as e:
        raise ExerciseError(f"not done yet: {fn.__name__} still raises NotImplementedError; replace "
                            "`# YOUR CODE HERE` and the `raise` under it with your code") from e
    except Exception:
        pass  # no process group here: the real runs below say what is wrong
    for world_size in WORLD_SIZES:
        ranks = _run_hook(fn, source, world_size)
        _check_hook_problems(fn, ranks, source)
        seconds = _check_hook_gradients(fn, ranks, world_size)
    return (f"{fn.__name__}: correct. In real gloo runs of {' and '.join(map(str, WORLD_SIZES))} processes, every "
            f"rank's gradients equal one process's on the whole batch (float64, atol {GRAD_ATOL:g}), the hook "
            f"returned at once, and rank 0 recorded {seconds:.3f} s: its wait for rank 1, which started "
            f"backward {WAIT_S} s late")


def _check_hook_problems(fn: Callable, ranks: list[dict], source: str) -> None:
    name = fn.__name__
    for rank, result in enumerate(ranks):
        for kind, detail in result["problems"]:
            if kind == "call took":
                continue
            if kind == "blank":
                raise ExerciseError(f"not done yet: {name} still raises NotImplementedError; replace "
                                    "`# YOUR CODE HERE` and the `raise` under it with your code")
            messages = {
                "raised": f"{name} raised {detail} on rank {rank}",
                "returned": f"{name} returned {detail}, not a torch.futures.Future: return the all-reduce's "
                            "future (dist.all_reduce(..., async_op=True).get_future()), chained with .then",
                "list": f"the future {name} returned completes with a list of tensors, as the all-reduce's own "
                        "future does; DDP needs a future of the bucket's tensor (it fails with 'expected the hook "
                        "result is a PyObject'): return fut.then(callback), the callback returning fut.value()[0]",
                "callback raised": f"the .then callback of {name} raised on rank {rank}: {detail}",
            }
            raise ExerciseError(messages[kind])
    blocked = max((d for kind, d in ranks[0]["problems"] if kind == "call took"), default=0.0)
    if blocked > WAIT_S / 2:
        if "barrier" in source:
            raise ExerciseError(f"barrier inside the hook: on rank 0 the call to {name} took {blocked:.2f} s, "
                                "waiting for the late rank at a barrier; DDP calls the hook from backward, "
                                "per bucket: launch the all-reduce and return its future, with no barrier")
        raise ExerciseError(f"blocking hook: on rank 0 the call to {name} took {blocked:.2f} s, the late rank's "
                            "wait: the all-reduce ran synchronously inside it. Launch it with async_op=True, "
                            "return its future at once, and stop the clock in a .then callback")


def _check_hook_gradients(fn: Callable, ranks: list[dict], world_size: int) -> float:
    """The gradient checks, then the timing checks; returns rank 0's recorded seconds."""
    name = fn.__name__
    grads = [r["grads"] for r in ranks]
    if any(g is None for r in grads for g in r.values()):
        raise ExerciseError(f"no gradients after backward with {name}: return the future of the all-reduce")
    reference = _reference_gradients()
    if _max_diff(grads[0], grads[-1]) > GRAD_ATOL:
        raise ExerciseError(f"no all-reduce: after backward the ranks' gradients differ (by "
                            f"{_max_diff(grads[0], grads[-1]):.2e}); each kept the gradient of its own part "
                            "of the batch. All-reduce the bucket's buffer and return that all-reduce's future")
    if _max_diff(grads[0], reference) > GRAD_ATOL:
        if _max_diff(grads[0], reference, world_size) <= GRAD_ATOL:
            raise ExerciseError(f"no division by the world size: the gradients came out {world_size}x the "
                                "single-process reference. all_reduce sums the ranks' gradients; divide the "
                                f"bucket by the world size ({world_size}) to average them")
        if _max_diff(grads[0], reference, 1 / world_size) <= GRAD_ATOL:
            raise ExerciseError(f"divided twice: the gradients came out 1/{world_size} of the single-process "
                                "reference; divide by the world size once")
        for wrong in {2, 3} - {world_size}:
            if _max_diff(grads[0], reference, world_size / wrong) <= GRAD_ATOL:
                raise ExerciseError(f"divided by {wrong}, not the world size: at {world_size} processes the "
                                    f"gradients came out {world_size}/{wrong} of the single-process reference; "
                                    "divide by dist.get_world_size()")
        raise ExerciseError(f"the averaged gradients differ from one process on the whole batch by "
                            f"{_max_diff(grads[0], reference):.2e} (tolerance {GRAD_ATOL:g})")
    recorded = [r["recorded"] for r in ranks]
    for rank, values in enumerate(recorded):
        if not values:
            raise ExerciseError(f"nothing recorded: state is empty on rank {rank} after backward; append the "
                                "seconds from launch to completion to it (in the .then callback)")
        if not all(isinstance(v, float) for v in values):
            raise ExerciseError(f"state holds {values[0]!r} on rank {rank}: append the seconds as a number "
                                "(a difference of time.perf_counter() readings)")
    seconds, waited = max(recorded[0]), ranks[0]["backward_s"]
    if waited < WAIT_S / 2:  # the grader's own set-up, not the learner's hook
        raise RuntimeError(f"the grader's run did not make rank 0 wait ({waited:.3f} s); run it again")
    if seconds < waited / 2:
        raise ExerciseError(f"clock stopped before the future completed: rank 0's backward waited {waited:.2f} s "
                            f"for rank 1 (which started {WAIT_S} s late), but {name} recorded {seconds:.4f} s. "
                            "dist.all_reduce(..., async_op=True) returns at once; stop the clock in a .then "
                            "callback, which runs when the all-reduce has completed")
    if seconds > 2 * waited + 0.05:
        unit = " (milliseconds? record seconds)" if 0.3 < seconds / (1e3 * waited) < 3 else ""
        raise ExerciseError(f"{name} recorded {seconds:.3f} on rank 0, more than its whole backward took "
                            f"({waited:.3f} s){unit}; start the clock when the hook launches the all-reduce")
    return seconds


# ------------------------------------------------------------------------------------------------
# Block D variant A (src/minitrain/timing.py): BarrierTimer's barriers and clock, in real gloo processes

ALONE_SLEEP_S = 0.05  # the single-process check: the "backward" is a sleep this long
TIMER_SCENARIOS = ("late start", "late finish")  # rank 1 sleeps TIMER_WAIT_S before before_backward / after backward
TIMER_WAIT_S = 0.5  # half of it separates a right figure from a wrong one, with room for a busy machine


def _timer_rank(folder: str, timer_cls: type) -> None:
    """One rank of the timer's run: per scenario, a real DDP backward between the timer's brackets,
    rank 1 late before them or after backward; the milliseconds each rank measured, saved."""
    rank = int(os.environ["RANK"])
    _silence(Path(folder) / f"rank-{rank}.log")
    _, world_size = join_group()
    model = DistributedDataParallel(_tiny_model())
    inputs, targets = (t.chunk(world_size)[rank] for t in _batch())
    results = {}
    for scenario in TIMER_SCENARIOS:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        timer = timer_cls(None)
        dist.barrier()
        try:
            if rank == 1 and scenario == "late start":
                time.sleep(TIMER_WAIT_S)
            timer.before_backward()
            loss.backward()
            if rank == 1 and scenario == "late finish":
                time.sleep(TIMER_WAIT_S)
            timer.after_backward()
            results[scenario] = ("ms", timer.pop_ms())
        except NotImplementedError as e:
            results[scenario] = ("blank", str(e))
        except Exception as e:
            results[scenario] = ("raised", f"{type(e).__name__}: {e}")
    _leave(folder, rank, results)


def _timer_alone(timer_cls: type) -> float | None:
    """One process, no process group: the timer around a sleep of ALONE_SLEEP_S; its figure."""
    timer = timer_cls(None)
    try:
        timer.before_backward()
        time.sleep(ALONE_SLEEP_S)
        timer.after_backward()
        return timer.pop_ms()
    except NotImplementedError as e:
        raise ExerciseError(f"{e}: BarrierTimer still raises NotImplementedError") from e
    except Exception as e:
        raise ExerciseError(f"without a process group (one process, as train.py runs with 1 rank) BarrierTimer "
                            f"raised {type(e).__name__}: {e}; call dist.barrier() only when "
                            "dist.is_initialized()") from e


def grade_barrier_timer(timer_cls: type) -> str:
    """Variant A's timer (a module's class: the workers import it): alone, its milliseconds of a
    sleep; in a real 2-process DDP run, rank 0's time must leave out rank 1's late start and take
    in rank 1's late finish (the barriers), in milliseconds."""
    ms = _timer_alone(timer_cls)
    if ms is None or isinstance(ms, bool) or not isinstance(ms, (int, float)):
        raise ExerciseError(f"nothing measured: after after_backward, pop_ms() gave {ms!r}; set self.ms to the "
                            "milliseconds from the clock's start to after the second barrier")
    if ALONE_SLEEP_S / 2 <= ms <= 20 * ALONE_SLEEP_S:
        raise ExerciseError(f"seconds, not milliseconds: around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer "
                            f"measured {ms:.3f}; timings.jsonl holds ms: multiply the perf_counter difference by 1e3")
    if not ALONE_SLEEP_S * 1e3 / 2 <= ms <= 20 * ALONE_SLEEP_S * 1e3:
        raise ExerciseError(f"around a {ALONE_SLEEP_S * 1e3:.0f} ms backward the timer measured {ms:.3f} ms: start "
                            "the clock in before_backward and stop it in after_backward (time.perf_counter())")
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        try:
            spawn_workers(_timer_rank, 2, str(folder), timer_cls, start_method=fast_start_method())
        except Exception as e:
            raise ExerciseError(f"the 2-process run with the timer failed ({type(e).__name__}: "
                                f"{str(e).strip().splitlines()[-1]}); its ranks' output:\n{_log_tails(folder)}") from e
        ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(2)]
    for rank, result in enumerate(ranks):
        for kind, detail in result.values():
            if kind != "ms":
                raise ExerciseError(f"in the 2-process run the timer raised on rank {rank}: {detail}")
    late_start, late_finish = (ranks[0][scenario][1] for scenario in TIMER_SCENARIOS)
    wait_ms = TIMER_WAIT_S * 1e3
    if late_start > wait_ms / 2:
        raise ExerciseError(f"no barrier before the clock: rank 1 reached backward {wait_ms:.0f} ms late and rank 0 "
                            f"measured {late_start:.0f} ms, its own wait included; call dist.barrier() first, then "
                            "start the clock (the barrier lines the ranks up)")
    if late_finish < wait_ms / 2:
        raise ExerciseError(f"no barrier before stopping the clock: rank 1 finished backward {wait_ms:.0f} ms late and "
                            f"rank 0 measured {late_finish:.0f} ms; call dist.barrier() after backward, then stop "
                            "the clock: the step is done when the slowest rank is")
    return (f"Block D variant A: correct. Alone, {ms:.0f} ms around a {ALONE_SLEEP_S * 1e3:.0f} ms sleep; in a real "
            f"2-process run, rank 0 measured {late_start:.0f} ms when rank 1 started {wait_ms:.0f} ms late (left "
            f"out) and {late_finish:.0f} ms when it finished {wait_ms:.0f} ms late (taken in)")


# ------------------------------------------------------------------------------------------------
# 05-verification: states_equivalent(a, b, atol) -> tuple[bool, float]


def _pair(fn: Callable, a: dict, b: dict, atol: float, shown: str) -> tuple[bool, float]:
    result = _call(fn, f"{fn.__name__}({shown})", a, b, atol)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ExerciseError(f"{fn.__name__} returned {result!r:.80}: return a pair (equivalent, largest "
                            "absolute difference), e.g. `return ok, largest`")
    ok, largest = result
    if not isinstance(ok, bool):
        raise ExerciseError(f"{fn.__name__} returned {type(ok).__name__} as its verdict: return True or False"
                            + (" (bool(...) of a tensor)" if isinstance(ok, torch.Tensor) else ""))
    if isinstance(largest, bool) or not isinstance(largest, (int, float)):
        raise ExerciseError(f"{fn.__name__} returned {type(largest).__name__} as the largest difference: return "
                            "a Python float" + (" (`.item()` of a tensor)" if isinstance(largest, torch.Tensor) else ""))
    return ok, float(largest)


def _example_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return {"w1": torch.randn(4, 4, generator=g) * 0.02, "w2": torch.randn(4, 4, generator=g) * 0.02,
            "b": torch.randn(4, generator=g) * 0.02}


def _with(state: dict, name: str, index: int, delta: float) -> dict:
    out = {k: v.clone() for k, v in state.items()}
    out[name].view(-1)[index] += delta
    return out


def grade_states_equivalent(fn: Callable[[dict, dict, float], tuple[bool, float]],
                            real: tuple[dict, dict] | None = None) -> str:
    """Right verdicts and largest differences on pairs that catch the common mistakes; with `real`
    (the run's two state dicts), the same answer as minitrain.verify.compare_states."""
    name = fn.__name__
    a = _example_state()
    if _pair(fn, a, {k: v.clone() for k, v in a.items()}, ATOL, "a, a copy of a, 1e-5") != (True, 0.0):
        raise ExerciseError(f"{name} should return (True, 0.0) for a state dict and its exact copy")
    close = _with(a, "w2", 5, 5e-6)
    ok, largest = _pair(fn, a, close, 1e-5, "a pair 5e-6 apart, atol=1e-5")
    if not ok:
        raise ExerciseError("allclose without a tolerance: a pair 5e-6 apart at atol=1e-5 came out not "
                            "equivalent; torch.allclose's default atol is 1e-8 (and rtol 1e-5), so pass "
                            "atol=atol (and rtol=0 if you mean an absolute tolerance only)")
    expected = compare_states(a, close).max_abs_diff
    if not math.isclose(largest, expected, rel_tol=1e-3):
        raise ExerciseError(f"largest difference not measured: on a pair equal within atol but not bit for bit "
                            f"(one element {expected:.2e} apart) {name} returned {largest!r}; compute the largest "
                            "|a - b| over every element of every tensor, whatever the verdict")
    if _pair(fn, a, close, 1e-6, "a pair 5e-6 apart, atol=1e-6")[0]:
        raise ExerciseError("the atol argument ignored: a pair 5e-6 apart came out equivalent at atol=1e-6; "
                            "use the atol you are given, not a fixed tolerance")
    spread = _with(_with(_with(a, "w1", 0, 1e-4), "w2", 3, 3e-4), "b", 1, 2e-4)
    ok, largest = _pair(fn, a, spread, 1e-5, "a pair whose tensors all differ, the most in 'w2'")
    expected = compare_states(a, spread).max_abs_diff
    if ok:
        raise ExerciseError(f"{name} called a pair up to {expected:.0e} apart equivalent at atol=1e-5")
    if not math.isclose(largest, expected, rel_tol=1e-4):
        raise ExerciseError(f"largest difference: {name} returned {largest:.3e}, but the largest absolute "
                            f"difference over all tensors is {expected:.3e} (in 'w2'); take the max of "
                            "|a - b| over every element of every tensor")
    if _pair(fn, a, dict(reversed(list(a.items()))), ATOL, "a, a copy with its keys in another order") != (True, 0.0):
        raise ExerciseError("values compared by position: a copy of the state dict with its keys in another "
                            "order did not come out (True, 0.0); match the tensors by name, as in a[k] and b[k]")
    for shown, other in (("a copy with an extra tensor", {**a, "extra": torch.zeros(2)}),
                         ("a copy missing a tensor", {k: v for k, v in a.items() if k != "b"})):
        if _keys_checked(lambda: _pair(fn, a, other, ATOL, shown), shown)[0]:
            raise ExerciseError(f"wrong keys: {shown} came out equivalent; compare the key sets first "
                                "(a.keys() == b.keys())")
        if _keys_checked(lambda: _pair(fn, other, a, ATOL, shown), shown)[0]:
            raise ExerciseError(f"wrong keys: with {shown} as the first argument the pair came out equivalent; "
                                "compare the key sets first (a.keys() == b.keys())")
    prefixed = {f"module.{k}": v for k, v in a.items()}
    if _keys_checked(lambda: _pair(fn, a, prefixed, ATOL, "a copy with `module.` keys"), "module. keys")[0]:
        raise ExerciseError("only the common keys compared: against the same tensors under `module.`-prefixed names "
                            "(a state_dict saved from the DDP wrapper, as the sheet's snippet does) no name is "
                            "shared, nothing was compared, and the pair came out equivalent; the key sets must be equal")
    reshaped = {**a, "b": a["b"].reshape(1, 4)}
    if _pair(fn, a, reshaped, ATOL, "'b' of shape (4,) against (1, 4)")[0]:
        raise ExerciseError("shapes not compared: 'b' is (4,) in one state dict and (1, 4) in the other, and "
                            f"{name} called them equivalent (torch.allclose broadcasts); compare shapes too")
    verdict = (f"{name}: correct on exact copies, a pair 5e-6 apart at atol 1e-5 and 1e-6, the largest "
               "difference over several tensors, reordered keys, different key sets and different shapes")
    if real is not None:
        comparison = compare_states(*real)
        ok, largest = _pair(fn, *real, ATOL, "rank 0's and rank 1's state dicts")
        if ok != comparison.allclose or not math.isclose(largest, comparison.max_abs_diff, rel_tol=1e-4,
                                                         abs_tol=1e-12):
            raise ExerciseError(f"on the run's two state dicts, {name} disagrees with minitrain.verify: "
                                f"allclose {comparison.allclose}, largest difference {comparison.max_abs_diff:.3e}")
        verdict += (f"; on the run's two state dicts it agrees with minitrain.verify (equivalent: "
                    f"{comparison.allclose}, largest difference {comparison.max_abs_diff:.1e})")
    return verdict
