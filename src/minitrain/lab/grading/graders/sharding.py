"""The graders of sharding: 02-sharding's shard_indices, and Block B's make_shard and check_shards
(src/minitrain/data.py), the latter in a real 3-process gloo run."""

import json
import os
import shutil
import tempfile
import types
from collections.abc import Callable
from itertools import product
from pathlib import Path

from torch.utils.data.distributed import DistributedSampler

from minitrain.data import load_corpus
from minitrain.lab.grading.graders.learner import corpus, function
from minitrain.lab.grading.graders.running import (STILL_BLANK, ExerciseError, call_learner, gpu_habit, join_group,
                                                   save_and_leave, silence_output, spawn_ranks)
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.todo import NotDone

# 02-sharding: shard_indices(num_sentences, rank, world_size) -> list[int]

SHARD_CASES = [(10, 2), (11, 2), (24000, 2), (10, 3), (11, 3), (7, 3), (5, 1), (9, 4)]


def _is_block(indices: list[int]) -> bool:
    return len(indices) > 1 and indices == list(range(indices[0], indices[0] + len(indices)))


def _sampler_split(got: dict[tuple[int, int, int], list[int]]) -> tuple[str, str] | None:
    """A split that gave every case a DistributedSampler's indices: its mistake's name (the sampler's when it
    shuffles) and what it does; or None."""
    for shuffle, drop_last in product((True, False), repeat=2):
        if all(indices == list(DistributedSampler(range(n), w, r, shuffle=shuffle, drop_last=drop_last))
               for (n, r, w), indices in got.items()):
            name = ("DistributedSampler's split" if shuffle else "equal shards, the rest dropped" if drop_last
                    else "padded shards")
            does = ["shuffles the corpus"] * shuffle + ["drops the sentences left over" if drop_last else
                                                        "pads the last shards with sentences of the first"]
            sampler = f"DistributedSampler(shuffle={shuffle}, drop_last={drop_last})"
            return name, f"it {' and '.join(does)}, as {sampler} does"
    return None


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
            result = call_learner(fn, n, r, w, shown=_called(fn, n, r, w), blank=f"{fn.__name__} {STILL_BLANK}")
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
    if sampler := _sampler_split(got):  # a GPU tutorial's habit
        name, does = sampler
        raise ExerciseError(f"{name}: {_called(fn, n, r, w)} returned {mine[:8]}: {does}; the sheet's rule is index "
                            "% world_size == rank, every sentence once, in corpus order (the Shard shuffles them "
                            "itself, per rank and epoch)")
    same = [(n, w) for n, r, w in wrong if w > 1 and all(got[n, q, w] == got[n, 0, w] for q in range(w))]
    if same:  # LOCAL_RANK or a constant read instead of the argument
        n, w = same[0]
        raise ExerciseError(f"rank ignored: with {n} sentences and {w} ranks every rank got the same indices "
                            f"({got[n, 0, w][:6]}...); use the rank argument (the grader calls it for each rank in "
                            "turn, in one process: no LOCAL_RANK, no process group)")
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
                if "process group" in str(e):  # dist.get_rank() without one: a GPU tutorial's habit
                    raise ExerciseError(f"make_shard asks the process group for its place (dist.get_rank() or "
                                        f"get_world_size()), and there is none: the grader calls make_shard({rank}, "
                                        f"{world_size}) in one plain process, as a unit test would; use its rank "
                                        "and world_size arguments") from e
                raise
        make_shard_indices.called = lambda n, r, w: f"make_shard({r}, {w}) on a {n}-sentence corpus"
        make_shard_indices.__name__ = "make_shard"
        return "Block B, " + grade_shard_indices(make_shard_indices, None, MAKE_SHARD_CASES)


SHARD_SCENARIOS = {  # name -> (each rank's (sentence count, first sentence), the corpus total)
    "right": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "birds sing")], 11),
    "counts off": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "birds sing")], 12),
    "same first": ([(4, "the cat sleeps"), (4, "a dog runs"), (3, "a dog runs")], 11),
}


def _in_key_order(result: object) -> object:
    """A dict with its keys sorted (the docstring sets no order), anything else as it is: compared as its repr."""
    return dict(sorted(result.items(), key=lambda item: str(item[0]))) if isinstance(result, dict) else result


def _check_shards_rank(folder: str, check_shards: Callable) -> None:
    """One rank of check_shards' run: every scenario in turn, its result or error saved per rank."""
    rank = int(os.environ["RANK"])
    silence_output(Path(folder) / f"rank-{rank}.log")
    _, world_size = join_group()
    results = {}
    for name, (reports, total) in SHARD_SCENARIOS.items():
        count, first = reports[rank]
        print(f"--- scenario {name}", flush=True)
        try:
            got = check_shards(types.SimpleNamespace(
                num_sentences=count, first_sentence=first, sentences=[first] * count), rank, world_size, total)
            results[name] = ("returned", repr(_in_key_order(got)))
        except NotImplementedError as e:
            results[name] = ("blank", blank.what(e) or str(e))
        except Exception as e:
            results[name] = ("raised", f"{type(e).__name__}: {e}")
    results["pid"] = ("pid", str(os.getpid()))
    save_and_leave(folder, rank, results)


def grade_check_shards(check_shards: Callable) -> str:
    """`check_shards` (a module's function: the workers import it) in a real gloo run of 3 ranks, on
    shards that add up, shards whose counts do not, and two ranks with the same first sentence."""
    try:  # a blank stub says so at once, before any process starts
        check_shards(types.SimpleNamespace(num_sentences=1, first_sentence="a", sentences=["a"]), 0, 1, 1)
    except NotImplementedError as e:
        raise NotDone(f"{blank.what(e) or e}: check_shards still raises NotImplementedError") from e
    except Exception:
        pass  # no process group here: the real run below says what is wrong
    with tempfile.TemporaryDirectory(prefix="minitrain-grader-") as tmp:
        folder = Path(tmp)
        spawn_ranks(_check_shards_rank, CHECK_SHARDS_WORLD, folder, check_shards, run="of check_shards")
        ranks = [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(CHECK_SHARDS_WORLD)]
        logs = [(folder / f"rank-{r}.log").read_text(errors="replace").split("--- scenario ")
                for r in range(CHECK_SHARDS_WORLD)]
    if any(kind == "blank" for rank in ranks for kind, _ in rank.values()):
        what = next(detail for rank in ranks for kind, detail in rank.values() if kind == "blank")
        raise NotDone(f"{what}: check_shards still raises NotImplementedError")
    reports, total = SHARD_SCENARIOS["right"]
    for rank, result in enumerate(ranks):
        kind, detail = result["right"]
        if kind == "raised" and not detail.startswith("RuntimeError"):
            raise ExerciseError(gpu_habit("check_shards", detail) or
                                f"check_shards raised {detail} on rank {rank} with right shards")
        if kind == "raised":
            counts = " + ".join(str(c) for c, _ in reports)
            raise ExerciseError((
                f"right shards rejected: for {CHECK_SHARDS_WORLD} ranks of {counts} sentences (corpus {total}, the "
                f"first sentences all different) check_shards raised {detail} on rank {rank}; add up all "
                f"{CHECK_SHARDS_WORLD} ranks' counts (the sheet's rank 0 + rank 1 is its 2-rank case) and compare "
                "all their first sentences"))
        expected = repr(_in_key_order({"shard_sentences": [c for c, _ in reports],
                                       "first_sentences": [f for _, f in reports]}))
        if detail != expected:
            raise ExerciseError(f"check_shards returned {detail:.120} on rank {rank}, expected {expected} "
                                "(every rank's counts and first sentences, gathered in rank order)")
        log = next(part for part in logs[rank] if part.startswith("right"))
        if reports[rank][1] not in log or str(reports[rank][0]) not in log:
            raise ExerciseError(f"size and first sentence not logged: rank {rank}'s output does not show its shard's size "
                                f"({reports[rank][0]}) and first sentence ({reports[rank][1]!r}); print both, on every rank")
        pid_line = f"[rank {rank}] pid {ranks[rank]['pid'][1]}"
        if not any(line.startswith(pid_line) for line in log.splitlines()):
            raise ExerciseError(f"no `[rank R] pid PID` line: rank {rank}'s output has no line starting {pid_line!r}; "
                                "start the line you print with it (the lab's fault tests and notebook 13 find each "
                                "rank's process there), as check_shards' docstring says")
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
        other = [detail for _, detail in (rank[name] for rank in ranks) if not detail.startswith("RuntimeError:")]
        if other:  # the docstring says RuntimeError
            detail, error = other[0], other[0].split(":")[0]
            raise ExerciseError(f"{error} instead of RuntimeError: with {name!r} shards check_shards raised "
                                f"{detail:.100}; raise RuntimeError(...), as its docstring says"
                                + (" (an assert is skipped under python -O, and the check with it)"
                                   if error == "AssertionError" else ""))
    return (f"Block B, check_shards: correct in a real {CHECK_SHARDS_WORLD}-rank gloo run: right shards pass with "
            "every rank's counts and first sentences, logged on each rank; counts that do not add up and two "
            "equal first sentences raise on every rank")


def grade_b1(repo: Path, todo: Todo) -> str:
    """Block B's split: the graded tree's make_shard."""
    from minitrain import data
    return grade_make_shard(data.make_shard, corpus(repo))


def grade_b2(repo: Path, todo: Todo) -> str:
    """Block B's checks: the graded tree's check_shards."""
    from minitrain import data
    return grade_check_shards(function(data, "check_shards",
                                       f"{todo.file} has no check_shards(shard, rank, world_size, corpus_total)"))
