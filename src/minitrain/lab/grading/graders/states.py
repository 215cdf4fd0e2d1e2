"""The graders that compare state dicts: 03-wrapping's rank1_holds_rank0_init (bit for bit, on the wrap
demo's real files) and 05-verification's / Block E's states_equivalent (within atol, and the largest gap)."""

import math
from collections.abc import Callable
from pathlib import Path

import torch

from minitrain.data import SEED_BASE
from minitrain.lab.grading.graders.learner import function, solution_cell
from minitrain.lab.grading.graders.running import STILL_BLANK, ExerciseError, call_learner
from minitrain.lab.notebooks.wrapdemo import state_path
from minitrain.lab.todos.registry import EXPERIMENT, Todo
from minitrain.script import import_script
from minitrain.verify import ATOL, StateFileError, compare_states, load_state


def _keys_checked(call: Callable[[], object], shown: str):
    """call(), with a KeyError from the learner's code named as the key mistake it is."""
    try:
        return call()
    except ExerciseError as e:
        if isinstance(e.__cause__, KeyError):
            raise ExerciseError(f"wrong keys: {shown} raised KeyError {e.__cause__}; compare the key sets "
                                "first (a.keys() == b.keys())") from e
        raise


def _answered(fn: Callable, shown: str, instead: str, *args):
    """fn(*args) through call_learner, with two mistakes named that show only as what they raise: an assert (the sheet's
    snippet asserts, but these functions answer: `instead` says how) and == between tensors."""
    call = f"{fn.__name__}({shown})"
    try:
        return call_learner(fn, *args, shown=call, blank=f"{fn.__name__} {STILL_BLANK}")
    except ExerciseError as e:
        cause = e.__cause__
        if isinstance(cause, AssertionError) and "CUDA" not in str(cause):  # torch's "not compiled with CUDA" is one
            said = str(cause).strip().splitlines()[0][:100] if str(cause).strip() else ""
            raise ExerciseError(f"an assert instead of an answer: {call} raised AssertionError{': ' * bool(said)}"
                                f"{said}; {instead}") from e
        if isinstance(cause, RuntimeError) and "Boolean value of Tensor" in str(cause):
            raise ExerciseError(f"tensors compared with ==: {call} raised RuntimeError: {cause}; == between two "
                                "tensors (or two dicts of them) gives a tensor of booleans, not one: compare each "
                                "pair with torch.equal (bit for bit) or torch.allclose (within atol)") from e
        raise


# ------------------------------------------------------------------------------------------------
# 03-wrapping: rank1_holds_rank0_init(before_rank0, after_rank1) -> bool


def _expect_bool(fn: Callable, a: dict, b: dict, shown: str) -> bool:
    result = _answered(fn, shown, "return False when they differ, True when they are the same", a, b)
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
                            "the broadcast copies the bytes, so compare with torch.equal, not allclose or "
                            "|x - y| < eps")
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
        raise ExerciseError("only the common keys compared, or the names rewritten: the same tensors under "
                            "`module.`-prefixed names (a DDP-wrapped model's state_dict) passed; the names differ, "
                            "so the answer is False: the key sets must be equal as given (nothing stripped, not "
                            "merely overlapping)")
    return (f"{fn.__name__}: correct. Rank 1 after wrapping holds rank 0's initial weights, all "
            f"{len(after1)} tensors bit for bit; rank 1's own initial weights do not; and the check catches "
            "one float step, any single tensor, and different key sets")


# ------------------------------------------------------------------------------------------------
# 05-verification and compare_states.py (Block E): states_equivalent(a, b, atol) -> tuple[bool, float]


def _pair(fn: Callable, a: dict, b: dict, atol: float, shown: str) -> tuple[bool, float]:
    result = _answered(fn, shown, "return (False, largest) for a pair that is not equivalent: compare_states.py's "
                       "main prints both and exits 1", a, b, atol)
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


def _tolerance_mistake(fn: Callable, a: dict, close: dict) -> str:
    """Why a pair 5e-6 apart came out not equivalent at atol=1e-5: atol given as rtol, bits compared, or no atol."""
    if _pair(fn, a, close, 0.5, "a pair 5e-6 apart, atol=0.5")[0]:  # as rtol, 0.5 lets the pair through
        return ("atol passed as rtol: a pair 5e-6 apart came out not equivalent at atol=1e-5, equivalent at 0.5; "
                "torch.allclose(x, y, atol) sets rtol, its third parameter (a tolerance relative to |y|), "
                "and leaves atol at 1e-8: pass atol=atol by keyword")
    step = _with(a, "w2", 5, 0.0)
    step["w2"].view(-1)[5] = torch.nextafter(a["w2"].view(-1)[5], torch.tensor(math.inf))
    if not _pair(fn, a, step, 1e-5, "a pair one float step apart, atol=1e-5")[0]:
        return ("bit for bit instead of within atol: a pair one float step apart came out not equivalent at "
                "atol=1e-5; torch.equal (or ==) asks for the same values, the docstring for allclose at the atol "
                "given: torch.allclose(x, y, atol=atol) per tensor")
    return ("allclose without a tolerance: a pair 5e-6 apart at atol=1e-5 came out not equivalent; "
            "torch.allclose's default atol is 1e-8 (and rtol 1e-5), so pass atol=atol (and rtol=0 if you mean an "
            "absolute tolerance only)")


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
        raise ExerciseError(_tolerance_mistake(fn, a, close))
    expected = compare_states(a, close).max_abs_diff
    if not math.isclose(largest, expected, rel_tol=1e-3):
        if largest in (0.0, math.inf) or math.isnan(largest):
            raise ExerciseError(f"largest difference not measured: on a pair equal within atol but not bit for bit "
                                f"(one element {expected:.2e} apart) {name} returned {largest!r}; compute the largest "
                                "|a - b| over every element of every tensor, whatever the verdict")
        raise ExerciseError(f"not the largest difference: on a pair whose one element {expected:.2e} apart is the "
                            f"only difference {name} returned {largest:.2e} (a mean?); take the max of "
                            "|a - b| over every element of every tensor")
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
        raise ExerciseError("only the common keys compared, or the names rewritten: the same tensors under "
                            "`module.`-prefixed names (a state_dict saved from the DDP wrapper, as the sheet's "
                            "snippet does) came out equivalent; the names differ, so they are not: the key sets "
                            "must be equal as given (nothing stripped, not merely overlapping)")
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


def _wrap_folder(folder: Path) -> Path:
    """before/after files as the wrap demo saves them: two seeds before wrapping, rank 0's weights after."""
    from minitrain.lab.notebooks.wrapdemo import snapshot
    from minitrain.model import build_minigpt
    states = []
    for seed in (SEED_BASE, SEED_BASE + 1):
        torch.manual_seed(seed)
        states.append(snapshot(build_minigpt(50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)))
    for rank in range(2):
        torch.save(states[rank], state_path(folder, "before", rank))
        torch.save(states[0], state_path(folder, "after", rank))
    return folder


def grade_ex03(repo: Path, todo: Todo) -> str:
    """Notebook 03's exercise: the learner's rank1_holds_rank0_init, from its solution cell, on wrap-demo files."""
    with solution_cell(repo, todo, "rank1_holds_rank0_init") as (fn, folder):
        return grade_rank1_holds_rank0_init(fn, _wrap_folder(folder))


def _run_states(repo: Path) -> tuple[dict, dict] | None:
    """The two ranks' final states of the learner's run, or None when there is none yet."""
    try:
        return tuple(load_state(repo / EXPERIMENT / f"state-rank-{r}.pt") for r in range(2))
    except StateFileError:
        return None


def grade_e(repo: Path, todo: Todo) -> str:
    """Block E: compare_states.py's states_equivalent, on built pairs and then on the learner's run."""
    fn = function(import_script(repo / todo.file), "states_equivalent",
                  "compare_states.py has no states_equivalent(a, b, atol)")
    return grade_states_equivalent(fn, real=_run_states(repo))
