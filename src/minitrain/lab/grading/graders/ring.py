"""Notebook 17's grader (ex17): the learner's ring reduce-scatter, all-gather and all-reduce (minitrain.ring) on real
gloo groups of 2, 3 and 4 processes, the built-in collectives made to raise inside them. Rank r's tensor is an
integer-valued base times 2**r, so every sum is exact in float32 and a wrong one says which ranks' shares it holds
and which chunk: the mistake is named, never only "wrong values"."""

import json
import os
import re
import tempfile
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from minitrain.hang_report import named_hang
from minitrain.lab.grading.graders.running import (ExerciseError, join_group, rank_log_tails, rank_logs,
                                                   save_and_leave, silence_output)
from minitrain.lab.todos import blank
from minitrain.lab.todos.registry import Todo
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.script import import_script
from minitrain.todo import NotDone

WORLD_SIZES = (2, 3, 4)
SIZES = (12, 10, 1)  # divisible by 2, 3 and 4; not by 3 or 4; fewer elements than ranks
FORBIDDEN = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
             "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "barrier")
LIMIT_S = 120.0
TIMEOUT_S = 5.0  # the collective timeout of the graded runs: a right ring's run takes a fraction of a second
COLLECTIVE_TIMEOUT = "MINITRAIN_COLLECTIVE_TIMEOUT"
TIMED_OUT = re.compile(r"Timed out waiting (\d+)ms for (send|recv) operation")


class Forbidden(RuntimeError):
    """A built-in collective called inside the learner's ring."""


def _forbid() -> None:
    """Every built-in collective of torch.distributed raises Forbidden, naming itself."""
    for name in FORBIDDEN:
        def refuse(*args, _name=name, **kwargs):
            raise Forbidden(f"dist.{_name}")
        setattr(dist, name, refuse)


def _rank(logs: str, path: str) -> None:
    """One rank: each case of the learner's ring, what it returned, into logs/rank-R.json. A rank that raises prints
    its traceback to its log first: spawn reports one rank's error only, and after a send that timed out on one rank
    the other's is "Connection closed by peer", which names nothing."""
    silence_output(Path(logs) / f"rank-{os.environ['RANK']}.log")
    try:
        _cases(logs, path)
    except BaseException:
        traceback.print_exc()
        raise


def _cases(logs: str, path: str) -> None:
    rank, n = join_group()
    _forbid()  # before the learner's module is imported: a name it imports from torch.distributed raises too
    ring = import_script(Path(path))
    results: dict[str, object] = {}
    for size in SIZES:
        base = torch.arange(1.0, size + 1)
        given = base * 2.0 ** rank
        try:
            got = ring.ring_reduce_scatter(given)
            results[f"reduce_scatter {size}"] = {"got": torch.as_tensor(got).reshape(-1).tolist(),
                                                 "input_kept": torch.equal(given, base * 2.0 ** rank)}
        except Forbidden as e:
            results[f"reduce_scatter {size}"] = {"forbidden": str(e)}
        tensor = (base * 2.0 ** rank).reshape(-1, 1) if size % 2 else base * 2.0 ** rank
        try:
            returned = ring.ring_all_reduce(tensor)
            results[f"all_reduce {size}"] = {"got": tensor.reshape(-1).tolist(), "returned": type(returned).__name__}
        except Forbidden as e:
            results[f"all_reduce {size}"] = {"forbidden": str(e)}
    try:
        results["all_gather"] = {"got": torch.as_tensor(ring.ring_all_gather(torch.full((3,), float(rank)))).tolist()}
    except Forbidden as e:
        results["all_gather"] = {"forbidden": str(e)}
    save_and_leave(logs, rank, results)


def _timed_out(text: str, script: str) -> str | None:
    """`waits 5 s at ring.py:31 for its send to complete` from gloo's timeout in a rank's traceback, else None (the
    lab's hang report names waits inside torch.distributed's functions, not a Work's wait())."""
    found = TIMED_OUT.search(text)
    if not found:
        return None
    lines = re.findall(rf'File "[^"]*{re.escape(script)}", line (\d+)', text)
    where = f" at {script}:{lines[-1]}" if lines else ""
    return f"waits {int(found[1]) / 1000:g} s{where} for its {found[2]} to complete"


def _ranks_in(values: list[float], base: list[float]) -> list[int] | None:
    """The ranks whose shares `values` sums, read from the powers of two; None when it is no such sum of `base`."""
    if len(values) != len(base) or not values:
        return None
    weight = round(values[0] / base[0])
    if weight < 0 or any(v != b * weight for v, b in zip(values, base)):
        return None
    return [r for r in range(8) if weight >> r & 1]


def _scattered(n: int, rank: int, size: int, got: list[float]) -> str | None:
    """What is wrong with rank `rank`'s ring_reduce_scatter of `size` elements on n ranks, or None."""
    from minitrain.ring import chunks
    base = [c.tolist() for c in chunks(torch.arange(1.0, size + 1), n)]
    if got == [x * (2 ** n - 1) for x in base[rank]]:
        return None
    held = {k: ranks for k in range(n) if (ranks := _ranks_in(got, base[k])) is not None}
    where = f"ring_reduce_scatter of {size} elements on {n} ranks: rank {rank} returned"
    if len(got) != len(base[rank]):
        return (f"{where} {len(got)} elements; chunk {rank} as chunks() cuts the tensor has {len(base[rank])} (the "
                "chunks must cover the whole tensor, also when its size is not a multiple of the world size)")
    if got == [x * (2 ** n - 1) / n for x in base[rank]]:
        return f"{where} the average of chunk {rank} over the ranks: the sum is asked, as dist.all_reduce's default"
    if rank in held:
        return (f"{where} chunk {rank} with the shares of ranks {held[rank]} only: what a step receives is not added "
                "to this rank's copy of that chunk (+=), or the steps add into other chunks than the one it returns "
                "(rank r ends holding chunk r, every rank's share in)")
    if full := [k for k, ranks in held.items() if len(ranks) == n]:
        return (f"{where} chunk {full[0]}, summed: rank r must end holding chunk r (count which chunk each step "
                "sends and receives)")
    return f"{where} {len(got)} elements that are no sum of whole shares of one chunk: chunk {rank} summed is expected"


def mistakes(n: int, results: list[dict]) -> list[str]:
    """What is wrong in the ranks' results of an n-process run: the first mistake of each function (a wrong
    reduce-scatter or all-gather is not counted again in the all-reduce built on them); none: right."""
    found: dict[str, str] = {}
    for rank, result in enumerate(results):
        for case, got in result.items():
            function = f"ring_{case.split()[0]}"
            if function in found:
                continue
            if "forbidden" in got:
                found[function] = (f"{function} called {got['forbidden']}: notebook 17 writes the ring from dist.isend "
                                   "and dist.irecv (or dist.batch_isend_irecv) only")
            elif case.startswith("reduce_scatter"):
                if not got["input_kept"]:
                    found[function] = ("ring_reduce_scatter changed the tensor it was given: add into copies of its "
                                       "chunks")
                elif wrong := _scattered(n, rank, int(case.split()[1]), got["got"]):
                    found[function] = wrong
            elif case.startswith("all_reduce"):
                size = int(case.split()[1])
                if got["returned"] != "NoneType":
                    found[function] = (f"ring_all_reduce returned a {got['returned']}: it sums in place and returns "
                                       "None, as dist.all_reduce does")
                elif got["got"] != (want := [x * (2.0 ** n - 1) for x in range(1, size + 1)]):
                    ranks = _ranks_in(got["got"], [float(x) for x in range(1, size + 1)])
                    summed = next((i for i in range(size) if got["got"][i] != want[i]), size)
                    if summed and got["got"][:summed] == want[:summed]:
                        found[function] = (f"ring_all_reduce of {size} elements on {n} ranks: the last "
                                           f"{size - summed} elements were not summed: the chunks must cover the "
                                           "whole tensor (pad it to a multiple of the world size)")
                        continue
                    if got["got"] == [x / n for x in want]:
                        found[function] = (f"ring_all_reduce on {n} ranks: the average, where the sum is asked (as "
                                           "dist.all_reduce's default; DDP's hook divides before it)")
                        continue
                    held = f"the sum of ranks {ranks}" if ranks is not None else "values that are no sum of whole shares"
                    found[function] = (f"ring_all_reduce of {size} elements on {n} ranks: rank {rank}'s tensor holds "
                                       f"{held}, not the sum of all {n} (sum into the tensor itself)")
            elif got["got"] != torch.arange(float(n)).repeat_interleave(3).tolist():
                wrong = next((k for k in range(n) if got["got"][3 * k:3 * k + 3] != [float(k)] * 3), None)
                found[function] = (f"ring_all_gather on {n} ranks: rank {rank}'s result has "
                                   + (f"{len(got['got'])} elements, not {3 * n}" if wrong is None else
                                      f"{got['got'][3 * wrong:3 * wrong + 3]} where rank {wrong}'s chunk goes (a "
                                      "place never written holds whatever the memory held)")
                                   + "; every rank's chunk, in rank order, is expected")
    if {"ring_reduce_scatter", "ring_all_gather"} & found.keys():
        found.pop("ring_all_reduce", None)  # built on them: their mistake is named once
    return list(found.values())


def grade_ring(path: Path, world_sizes: tuple[int, ...] = WORLD_SIZES) -> str:
    """The learner's minitrain/ring.py at `path`, on real groups of each size; one PASS line, or the mistakes named."""
    ring = import_script(path)
    for name in ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"):
        try:  # a blank stub raises NotDone at once; written, it needs a process group
            getattr(ring, name)(torch.zeros(2))
        except NotDone:
            raise
        except Exception:
            pass
    for n in world_sizes:
        with tempfile.TemporaryDirectory(prefix="minitrain-ring-") as logs:
            try:
                spawn_workers(_rank, n, logs, str(path), start_method=fast_start_method(), timeout_s=LIMIT_S,
                              env={COLLECTIVE_TIMEOUT: os.environ.get(COLLECTIVE_TIMEOUT, f"{TIMEOUT_S:g}")})
            except Exception as e:
                said = f"{rank_logs(logs)}\n{e}"
                if (what := blank.in_output(said)) is not None:
                    raise NotDone(what) from e
                if hang := named_hang(said) or _timed_out(said, path.name):
                    raise ExerciseError(f"the {n}-rank run {hang}: a send that waits for its receive, on two ranks "
                                        "that both send first, waits for ever; start the send and the receive "
                                        "together (dist.batch_isend_irecv, or isend and irecv, then wait)") from e
                raise ExerciseError(f"the {n}-rank run failed: {str(e).strip().splitlines()[-1]}; its ranks' last "
                                    f"lines:\n{rank_log_tails(Path(logs))}") from e
            results = [json.loads((Path(logs) / f"rank-{r}.json").read_text()) for r in range(n)]
        if found := mistakes(n, results):
            raise ExerciseError("\n".join(found))
    return (f"ex17: correct. ring_reduce_scatter, ring_all_gather and ring_all_reduce on {', '.join(map(str, world_sizes))} "
            f"real ranks, sizes {', '.join(map(str, SIZES))}, point-to-point calls only: every sum exact")


def grade_ex17(repo: Path, todo: Todo) -> str:
    """Notebook 17's exercise: the graded tree's minitrain/ring.py."""
    return grade_ring(repo / todo.file)
