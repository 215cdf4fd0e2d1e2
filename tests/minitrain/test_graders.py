"""The exercises' graders: the reference solution passes, the student edition's blank stops with NotDone (told as
the protocol says it), and each common mistake fails with an ExerciseError that names it. The timing hook is
graded in real 2-process gloo runs, as in the notebook."""

import math
import random
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from minitrain.data import SEED_BASE
from minitrain.lab.grading import graders
from minitrain.lab.grading.graders import ExerciseError
from minitrain.lab.notebooks import wrapdemo
from minitrain.lab.todos.blank import told
from minitrain.model import build_minigpt
from minitrain.todo import NotDone
from minitrain.verify import compare_states

import learner


def blank(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


def fails_with(grade, fn, *args) -> str:
    """The verdict as the learner reads it: a blank is NotDone, a mistake an ExerciseError."""
    with pytest.raises((ExerciseError, NotDone)) as info:
        grade(fn, *args)
    return told(info.value) if isinstance(info.value, NotDone) else str(info.value)


# ------------------------------------------------------------------------------------------------
# 02: shard_indices


def shard_indices(num_sentences, rank, world_size):
    return [index for index in range(num_sentences) if index % world_size == rank]


def contiguous(num_sentences, rank, world_size):
    per = math.ceil(num_sentences / world_size)
    return list(range(rank * per, min(num_sentences, (rank + 1) * per)))


def hard_coded_two(num_sentences, rank, world_size):
    return [index for index in range(num_sentences) if index % 2 == rank]


def shuffled_per_rank_then_sliced(num_sentences, rank, world_size):
    order = list(range(num_sentences))
    random.Random(SEED_BASE + rank).shuffle(order)  # each rank slices a different permutation
    return sorted(order[rank::world_size])


def drops_the_last(num_sentences, rank, world_size):
    return list(range(rank, num_sentences - 1, world_size))


def descending(num_sentences, rank, world_size):
    return sorted(shard_indices(num_sentences, rank, world_size), reverse=True)


def a_set(num_sentences, rank, world_size):
    return set(shard_indices(num_sentences, rank, world_size))


def test_shard_indices_reference_passes_on_the_real_corpus(corpus_dir):
    verdict = graders.grade_shard_indices(shard_indices, corpus_dir)
    assert verdict.startswith("shard_indices: correct")
    assert "it picks the sheet's sentences for 2 and 3 ranks" in verdict


@pytest.mark.parametrize("fn, message", [
    (blank, "not done yet: blank still raises NotImplementedError"),
    (contiguous, "contiguous split: contiguous(10, 0, 2) gave rank 0 sentences 0..4 in one block"),
    (hard_coded_two, "world_size ignored: right for 2 ranks, wrong for"),
    (shuffled_per_rank_then_sliced, "overlap: with 10 sentences and 2 ranks, sentence"),
    (drops_the_last, "sentences missing: with 10 sentences and 2 ranks, sentence(s) [9] are in no shard"),
    (descending, "not in corpus order"),
    (a_set, "a_set(10, 0, 2) returned {0, 2, 4, 6, 8}: return a list of sentence indices"),
])
def test_shard_indices_mistakes_are_named(fn, message):
    assert fails_with(graders.grade_shard_indices, fn).startswith(message)


# ------------------------------------------------------------------------------------------------
# 03: rank1_holds_rank0_init, on files saved as the wrap demo saves them


@pytest.fixture(scope="module")
def wrap_folder(tmp_path_factory):
    """before/after files of two ranks: different seeds before wrapping, rank 0's weights after."""
    folder = tmp_path_factory.mktemp("wrapdemo")
    states = []
    for seed in (SEED_BASE, SEED_BASE + 1):
        torch.manual_seed(seed)
        model = build_minigpt(50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
        states.append(wrapdemo.snapshot(model))
    for rank in range(2):
        torch.save(states[rank], wrapdemo.state_path(folder, "before", rank))
        torch.save(states[0], wrapdemo.state_path(folder, "after", rank))
    return folder


def rank1_holds_rank0_init(before_rank0, after_rank1):
    return before_rank0.keys() == after_rank1.keys() and all(
        torch.equal(before_rank0[name], after_rank1[name]) for name in before_rank0)


def with_tolerance(before_rank0, after_rank1):
    return before_rank0.keys() == after_rank1.keys() and all(
        torch.allclose(before_rank0[name], after_rank1[name]) for name in before_rank0)


def returns_early(before_rank0, after_rank1):
    for name in before_rank0:
        return torch.equal(before_rank0[name], after_rank1[name])


def by_position(before_rank0, after_rank1):
    return all(torch.equal(x, y) for x, y in zip(before_rank0.values(), after_rank1.values()))


def keys_of_one_side(before_rank0, after_rank1):
    return all(torch.equal(before_rank0[name], after_rank1[name]) for name in before_rank0)


def common_keys_only(before_rank0, after_rank1):
    same_size = len(before_rank0) == len(after_rank1)
    return same_size and all(torch.equal(before_rank0[k], after_rank1[k]) for k in before_rank0.keys() & after_rank1.keys())


def returns_a_tensor(before_rank0, after_rank1):
    return torch.stack([(before_rank0[k] - after_rank1[k]).abs().max() for k in before_rank0]).max() == 0


def dicts_compared(before_rank0, after_rank1):  # a hurried shortcut: == on the two state dicts
    return before_rank0 == after_rank1


def asserts_allclose(before_rank0, after_rank1):  # the sheet's Block E snippet, taken literally
    for name in before_rank0:
        assert torch.allclose(before_rank0[name], after_rank1[name], atol=1e-5)
    return True


def within_epsilon(before_rank0, after_rank1):  # the float habit: never ==, always |x - y| < eps
    return before_rank0.keys() == after_rank1.keys() and all(
        (before_rank0[k] - after_rank1[k]).abs().max().item() < 1e-6 for k in before_rank0)


def as_bytes(before_rank0, after_rank1):  # right, in another form: the tensors' bytes
    return before_rank0.keys() == after_rank1.keys() and all(
        x.shape == after_rank1[k].shape and x.numpy().tobytes() == after_rank1[k].numpy().tobytes()
        for k, x in before_rank0.items())


def no_tolerance_at_all(before_rank0, after_rank1):  # right, in another form: allclose with both tolerances 0
    return before_rank0.keys() == after_rank1.keys() and all(
        torch.allclose(x, after_rank1[k], rtol=0, atol=0) for k, x in before_rank0.items())


@pytest.mark.parametrize("fn", [rank1_holds_rank0_init, as_bytes, no_tolerance_at_all])
def test_rank1_holds_rank0_init_reference_passes(wrap_folder, fn):
    verdict = graders.grade_rank1_holds_rank0_init(fn, wrap_folder)
    assert verdict.startswith(f"{fn.__name__}: correct")


@pytest.mark.parametrize("fn, message", [
    (blank, "not done yet"),
    (with_tolerance, "tolerance instead of bit for bit"),
    (returns_early, "not every tensor compared: a copy that differs only in"),
    (by_position, "compared by position"),
    (keys_of_one_side, "wrong keys: a copy missing the last tensor raised KeyError"),
    (returns_a_tensor, "returns_a_tensor returned Tensor (a tensor: use torch.equal"),
    (common_keys_only, "only the common keys compared, or the names rewritten: the same tensors under `module.`-"),
    (dicts_compared, "tensors compared with ==: dicts_compared(before_rank0, after_rank1) raised RuntimeError: "
     "Boolean value of Tensor"),
    (asserts_allclose, "an assert instead of an answer: asserts_allclose(before_rank0, before_rank1) raised "
     "AssertionError"),
    (within_epsilon, "tolerance instead of bit for bit"),
])
def test_rank1_holds_rank0_init_mistakes_are_named(wrap_folder, fn, message):
    assert fails_with(graders.grade_rank1_holds_rank0_init, fn, wrap_folder).startswith(message)


# ------------------------------------------------------------------------------------------------
# 04: my_timing_hook, run by the grader in 2 gloo processes


def my_timing_hook(state, bucket):
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(fut):
        state.append(time.perf_counter() - start)
        return fut.value()[0]

    return fut.then(done)


def stops_the_clock_at_launch(state, bucket):
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()
    state.append(time.perf_counter() - start)
    return fut.then(lambda fut: fut.value()[0])


def divides_by_two(state, bucket):
    tensor = bucket.buffer().div_(2)
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(fut):
        state.append(time.perf_counter() - start)
        return fut.value()[0]

    return fut.then(done)


def blocking(state, bucket):
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    dist.all_reduce(tensor)  # synchronous: returns once every rank has sent its bucket
    state.append(time.perf_counter() - start)
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def barrier_inside(state, bucket):
    dist.barrier()  # "line the ranks up first": the wait happens here, before the clock
    return my_timing_hook(state, bucket)


def returns_the_raw_future(state, bucket):  # a hurried shortcut: the all-reduce's own future, a list of tensors
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()
    fut.then(lambda fut: state.append(time.perf_counter() - start))
    return fut


def records_milliseconds(state, bucket):  # Block D's habit: timings.jsonl holds ms
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(fut):
        state.append((time.perf_counter() - start) * 1e3)
        return fut.value()[0]

    return fut.then(done)


def synchronizes_first(state, bucket):  # a GPU tutorial's habit: synchronize before reading the clock
    tensor = bucket.buffer().div_(dist.get_world_size())
    start = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(fut):
        torch.cuda.synchronize()
        state.append(time.perf_counter() - start)
        return fut.value()[0]

    return fut.then(done)


def sums_only(state, bucket):  # "time the all-reduce": DDP's hook divides, this one does not
    start = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def done(fut):
        state.append(time.perf_counter() - start)
        return fut.value()[0]

    return fut.then(done)


def averages_with_avg(state, bucket):  # right, in another form: ReduceOp.AVG, which gloo has since torch 2.8
    start = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, async_op=True).get_future()

    def done(fut):
        state.append(time.perf_counter() - start)
        return fut.value()[0]

    return fut.then(done)


def ddps_own_hook_timed(state, bucket):  # variant B's code copied: DDP's own all-reduce hook, with a stopwatch
    start = time.perf_counter()

    def done(fut):
        state.append(time.perf_counter() - start)
        return fut.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


# The reference hook passes: tests/minitrain/test_grade.py grades the reference put back, by the real path.


@pytest.mark.parametrize("fn", [averages_with_avg])
def test_a_timing_hook_in_another_form_passes(fn):
    assert graders.grade_timing_hook(fn).startswith(f"{fn.__name__}: correct. In real gloo runs of 3 and 2")


@pytest.mark.parametrize("fn, message", [
    (blank, "not done yet: blank still raises NotImplementedError"),
    (divides_by_two, "divided by 2, not the world size: at 3 processes the gradients came out 3/2"),
    (blocking, "blocking hook: on rank 0 the call to blocking took"),
    (barrier_inside, "barrier inside the hook: on rank 0 the call to barrier_inside took"),
    (stops_the_clock_at_launch, "clock stopped before the future completed: rank 0's backward waited"),
    (returns_the_raw_future, "the future returns_the_raw_future returned completes with a list of tensors"),
    (records_milliseconds, "records_milliseconds recorded "),
    (synchronizes_first, "synchronizes_first makes a CUDA call (torch.cuda.set_device or .synchronize"),
    (sums_only, "no division by the world size: the gradients came out 3x the single-process reference"),
    (ddps_own_hook_timed, "ddps_own_hook_timed calls PyTorch's own allreduce_hook: the exercise is to write"),
])
def test_timing_hook_mistakes_are_named(fn, message):
    assert fails_with(graders.grade_timing_hook, fn).startswith(message)


def test_the_hook_module_imports_what_the_hook_uses():
    source = graders.hook_module_source(my_timing_hook)
    assert {"import time as time", "import torch.distributed as dist"} <= set(source.splitlines())
    assert "def my_timing_hook(state, bucket):" in source
    compile(source, "learner_hook.py", "exec")


def notebook_helper(tensor):
    return tensor


def hook_with_a_helper(state, bucket):
    return notebook_helper(bucket.buffer())


def test_a_hook_using_a_notebook_helper_is_refused_before_any_run(monkeypatch):
    monkeypatch.setattr(notebook_helper, "__module__", "__main__")  # as if defined in a notebook cell
    with pytest.raises(ExerciseError, match="hook_with_a_helper uses `notebook_helper`, defined in this notebook"):
        graders.hook_module_source(hook_with_a_helper)


# ------------------------------------------------------------------------------------------------
# 05: states_equivalent


def states_equivalent(a, b, atol):
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return False, float("inf")
    largest = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    return all(torch.allclose(a[k], b[k], atol=atol) for k in a), largest


def no_tolerance(a, b, atol):
    ok, largest = states_equivalent(a, b, atol)
    return ok and all(torch.allclose(a[k], b[k]) for k in a), largest


def fixed_tolerance(a, b, atol):
    return states_equivalent(a, b, 1e-5)


def values_in_order(a, b, atol):
    pairs = list(zip(a.values(), b.values()))
    return (len(a) == len(b) and all(torch.allclose(x, y, atol=atol) for x, y in pairs),
            max((x - y).abs().max().item() for x, y in pairs))


def keys_of_the_first(a, b, atol):
    return (all(torch.allclose(a[k], b[k], atol=atol) for k in a if k in b),
            max((a[k] - b[k]).abs().max().item() for k in a if k in b))


def shapes_unchecked(a, b, atol):
    if a.keys() != b.keys():
        return False, float("inf")
    return (all(torch.allclose(a[k], b[k], atol=atol) for k in a),
            max((a[k] - b[k]).abs().max().item() for k in a))


def last_tensor_only(a, b, atol):
    ok, _ = states_equivalent(a, b, atol)
    return ok, (a[list(a)[-1]] - b[list(b)[-1]]).abs().max().item() if a.keys() == b.keys() else math.inf


def common_keys_only(a, b, atol):
    common = a.keys() & b.keys()
    if len(a) != len(b):
        return False, math.inf
    return (all(torch.allclose(a[k], b[k], atol=atol) for k in common),
            max(((a[k] - b[k]).abs().max().item() for k in common), default=0.0))


def verdict_only(a, b, atol):
    ok, _ = states_equivalent(a, b, atol)
    return ok, 0.0 if ok else math.inf


def tensor_largest(a, b, atol):
    ok, largest = states_equivalent(a, b, atol)
    return ok, torch.tensor(largest)


def same_names_and_shapes(a, b):
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)


def largest_of(a, b):
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def bit_for_bit(a, b, atol):  # ex03's habit carried over: torch.equal
    if not same_names_and_shapes(a, b):
        return False, math.inf
    return all(torch.equal(a[k], b[k]) for k in a), largest_of(a, b)


def atol_as_rtol(a, b, atol):  # a hurried shortcut: allclose's third parameter is rtol
    if not same_names_and_shapes(a, b):
        return False, math.inf
    return all(torch.allclose(a[k], b[k], atol) for k in a), largest_of(a, b)


def the_sheets_assert(a, b, atol):  # the sheet's "assertea torch.allclose(s0, s1, atol=1e-5)", taken literally
    assert same_names_and_shapes(a, b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol), f"{k} differs"
    return True, largest_of(a, b)


def mean_difference(a, b, atol):  # a hurried shortcut: the mean |a - b|
    ok, _ = states_equivalent(a, b, atol)
    return ok, max((a[k].double() - b[k].double()).abs().mean().item() for k in a) if ok else math.inf


def tensor_verdict(a, b, atol):  # the verdict left a tensor
    _, largest = states_equivalent(a, b, atol)
    return torch.tensor([torch.allclose(a[k], b[k], atol=atol) for k in a]).all(), largest


def by_hand(a, b, atol):  # right, in another form: |a - b| <= atol, an absolute tolerance only
    if not same_names_and_shapes(a, b):
        return False, math.inf
    largest = largest_of(a, b)
    return largest <= atol, largest


def with_assert_close(a, b, atol):  # right, in another form: torch.testing, its AssertionError caught
    if not same_names_and_shapes(a, b):
        return False, math.inf
    try:
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-5)
    except AssertionError:
        return False, largest_of(a, b)
    return True, largest_of(a, b)


@pytest.fixture(scope="module")
def run_states():
    torch.manual_seed(0)
    state = wrapdemo.snapshot(build_minigpt(50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0))
    other = {k: v.clone() for k, v in state.items()}
    next(iter(other.values())).view(-1)[0] += 1e-7  # within atol, but not equal: the grader must see it
    return state, other


@pytest.mark.parametrize("fn", [states_equivalent, by_hand, with_assert_close])
def test_states_equivalent_reference_passes(run_states, fn):
    verdict = graders.grade_states_equivalent(fn, real=run_states)
    largest = compare_states(*run_states).max_abs_diff
    assert verdict.startswith(f"{fn.__name__}: correct") and largest > 0
    assert verdict.endswith(f"agrees with minitrain.verify (equivalent: True, largest difference {largest:.1e})")


@pytest.mark.parametrize("fn, message", [
    (blank, "not done yet"),
    (no_tolerance, "allclose without a tolerance: a pair 5e-6 apart at atol=1e-5 came out not equivalent"),
    (fixed_tolerance, "the atol argument ignored"),
    (values_in_order, "values compared by position"),
    (keys_of_the_first, "wrong keys: a copy with an extra tensor came out equivalent"),
    (shapes_unchecked, "shapes not compared: 'b' is (4,) in one state dict and (1, 4) in the other"),
    (last_tensor_only, "largest difference not measured: on a pair equal within atol but not bit for bit"),
    (tensor_largest, "tensor_largest returned Tensor as the largest difference: return a Python float"),
    (common_keys_only, "only the common keys compared, or the names rewritten: the same tensors under `module.`-"),
    (verdict_only, "largest difference not measured: on a pair equal within atol but not bit for bit"),
    (bit_for_bit, "bit for bit instead of within atol: a pair one float step apart came out not equivalent"),
    (atol_as_rtol, "atol passed as rtol: a pair 5e-6 apart came out not equivalent at atol=1e-5, equivalent at 0.5"),
    (the_sheets_assert, "an assert instead of an answer: the_sheets_assert(a pair 5e-6 apart, atol=1e-6) raised "
     "AssertionError: w2 differs; return (False, largest)"),
    (mean_difference, "not the largest difference: on a pair whose one element 5.00e-06 apart is the only difference"),
    (tensor_verdict, "tensor_verdict returned Tensor as its verdict: return True or False (bool(...) of a tensor)"),
])
def test_states_equivalent_mistakes_are_named(fn, message):
    assert fails_with(graders.grade_states_equivalent, fn).startswith(message)


# ------------------------------------------------------------------------------------------------
# Block B and Block D, written by the learner in the student tree's data.py and timing.py

DATA, TIMING = "src/minitrain/data.py", "src/minitrain/timing.py"
SPLIT = "Block B: make_shard's split"
CHECKS = "Block B: the counts check and the first-sentence log"
BEFORE, AFTER = "Block D: BarrierTimer.before_backward", "Block D: BarrierTimer.after_backward"
REFERENCE_CHECKS = '''
print(f"[rank {rank}] pid {os.getpid()}, shard: {shard.num_sentences}, first: {shard.first_sentence!r}", flush=True)
reports = [None] * world_size
dist.all_gather_object(reports, (shard.num_sentences, shard.first_sentence))
counts, firsts = [c for c, _ in reports], [f for _, f in reports]
if sum(counts) != corpus_total or len(set(firsts)) != world_size:
    raise RuntimeError(f"sharding is broken: counts {counts}, firsts {firsts}")
return {"shard_sentences": counts, "first_sentences": firsts}
'''
REFERENCE_BEFORE = "if dist.is_initialized():\n    dist.barrier()\nself.start = time.perf_counter()"
REFERENCE_AFTER = "if dist.is_initialized():\n    dist.barrier()\nself.ms = (time.perf_counter() - self.start) * 1e3"


@pytest.fixture()
def learner_modules(tmp_path, monkeypatch, student_tree):
    monkeypatch.syspath_prepend(str(tmp_path))
    return lambda rel, writes, name: learner.import_written(student_tree, rel, writes, name, tmp_path)


@pytest.mark.parametrize("split, message", [
    ("mine = sentences[rank::world_size]", None),
    ("per = -(-len(sentences) // world_size)\nmine = sentences[rank * per:(rank + 1) * per]",
     "contiguous split: make_shard(0, 2) on a 10-sentence corpus gave rank 0 sentences 0..4 in one block"),
    ("mine = sentences[rank::2]", "world_size ignored: right for 2 ranks, wrong for"),
    ("mine = sentences[:-1][rank::world_size]", "sentences missing: with 10 sentences and 2 ranks, sentence(s) [9]"),
    ("raise NotDone(\"Block B: make_shard's split\")", "not done yet: make_shard"),
    ("mine = [s for i, s in enumerate(sentences) if i % world_size == rank]", None),
    ("from torch.utils.data.distributed import DistributedSampler\n"
     "mine = [sentences[i] for i in DistributedSampler(sentences, num_replicas=world_size, rank=rank)]",
     "DistributedSampler's split: make_shard(0, 2) on a 10-sentence corpus returned "),
    ("mine = sentences[dist.get_rank()::dist.get_world_size()]",
     "make_shard asks the process group for its place (dist.get_rank() or get_world_size()), and there is none"),
    ("mine = sentences[int(os.environ.get('LOCAL_RANK', 0))::world_size]",
     "rank ignored: with 10 sentences and 2 ranks every rank got the same indices ([0, 2, 4, 6, 8]...)"),
    ("mine = sentences[rank::world_size][:len(sentences) // world_size]  # equal shards, as drop_last",
     "equal shards, the rest dropped: make_shard(0, 2) on a 11-sentence corpus returned [0, 2, 4, 6, 8]: it drops"),
    ("mine = sentences[int(os.environ['LOCAL_RANK'])::world_size]",
     "make_shard(0, 2) on a 10-sentence corpus reads a variable only torchrun sets (KeyError: 'LOCAL_RANK')"),
], ids=["reference", "contiguous", "hard-coded 2", "drops the last", "blank", "the sheet's rule, literally",
        "GPU: DistributedSampler", "GPU: dist.get_rank()", "GPU: LOCAL_RANK", "equal shards", "GPU: LOCAL_RANK read"])
def test_make_shard_split_graded(learner_modules, corpus_dir, split, message):
    data = learner_modules(DATA, {SPLIT: split}, f"learner_data_{abs(hash(split))}")
    if message is None:
        assert graders.grade_make_shard(data.make_shard, corpus_dir).startswith(
            "Block B, make_shard: correct on 7 corpus sizes")
    else:
        assert fails_with(graders.grade_make_shard, data.make_shard, corpus_dir).startswith(message)


@pytest.mark.parametrize("name, checks, message", [  # the reference: test_grade.py
    ("no_counts", REFERENCE_CHECKS.replace("sum(counts) != corpus_total or ", ""),
     "counts not checked: shards of 4 + 4 + 3 sentences passed for a corpus of 12"),
    ("rank0_only", REFERENCE_CHECKS.replace("if sum(counts)", "if rank == 0 and sum(counts)").replace(
        "len(set(firsts)) != world_size:", "len(set(firsts)) != world_size and rank == 0:"),
     "checked on some ranks only: with 'counts off' shards, ranks [1, 2] went on"),
    ("no_log", "\n".join(line for line in REFERENCE_CHECKS.splitlines() if not line.startswith("print")),
     "size and first sentence not logged: rank 0's output does not show"),
    ("blank", 'raise NotDone("Block B: the counts check and the first-sentence log")',
     "not done yet: Block B: the counts check"),
    ("asserts", REFERENCE_CHECKS.replace("if sum(counts) != corpus_total or len(set(firsts)) != world_size:\n    raise "
                                         "RuntimeError(", "assert sum(counts) == corpus_total and len(set(firsts)) == "
                                         "world_size, ("),
     "AssertionError instead of RuntimeError: with 'counts off' shards check_shards raised AssertionError: sharding is "
     "broken"),
    ("value_error", REFERENCE_CHECKS.replace("raise RuntimeError", "raise ValueError"),
     "ValueError instead of RuntimeError: with 'counts off' shards check_shards raised ValueError: sharding is broken"),
    ("the_sheets_two_ranks", REFERENCE_CHECKS.replace("sum(counts)", "counts[0] + counts[1]"),
     "right shards rejected: for 3 ranks of 4 + 4 + 3 sentences (corpus 11, the first sentences all different) "
     "check_shards raised RuntimeError: sharding is broken: counts [4, 4, 3]"),
    ("counts_on_cuda", REFERENCE_CHECKS.replace(
        "reports = [None]", "dist.all_reduce(torch.tensor([shard.num_sentences]).cuda())\nreports = [None]"),
     "check_shards makes a CUDA call (torch.cuda.set_device or .synchronize, .cuda(), .to(rank))"),
    ("no_pid", REFERENCE_CHECKS.replace(" pid {os.getpid()},", ""),
     "no `[rank R] pid PID` line: rank 0's output has no line starting '[rank 0] pid "),
    ("logs_on_rank_0", REFERENCE_CHECKS.replace("print(", "if rank == 0:\n    print("),
     "size and first sentence not logged: rank 1's output does not show its shard's size (4) and first sentence"),
    ("tensors_then_objects", """
print(f"[rank {rank}] pid {os.getpid()}: {shard.num_sentences} sentences, the first {shard.first_sentence}",
      flush=True)
sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world_size)]
dist.all_gather(sizes, torch.tensor([shard.num_sentences]))
counts = [int(size) for size in sizes]
firsts = [None] * world_size
dist.all_gather_object(firsts, shard.first_sentence)
if sum(counts) != corpus_total:
    raise RuntimeError(f"the shards hold {counts} sentences, the corpus {corpus_total}")
if len(set(firsts)) < len(firsts):
    raise RuntimeError(f"two ranks start with the same sentence: {firsts}")
return {"first_sentences": firsts, "shard_sentences": counts}  # the keys in another order
""", None),
])
def test_check_shards_graded_in_three_processes(learner_modules, name, checks, message):
    data = learner_modules(DATA, {CHECKS: checks}, f"learner_checks_{name}")
    if message is None:  # a right answer in another form (the reference: test_grade.py)
        assert graders.grade_check_shards(data.check_shards).startswith("Block B, check_shards: correct")
    else:
        assert fails_with(graders.grade_check_shards, data.check_shards).startswith(message)


@pytest.mark.parametrize("ms, cause", [("(self.start - time.perf_counter()) * 1e3", "the wrong way round"),
                                       ("time.perf_counter() - self.start * 1e3", "* binds before -")])
def test_a_negative_time_names_its_cause(learner_modules, ms, cause):
    """Found alone, in one process, before any run: a subtraction the wrong way round, or * before -."""
    after = REFERENCE_AFTER.replace("(time.perf_counter() - self.start) * 1e3", ms)
    timing = learner_modules(TIMING, {BEFORE: REFERENCE_BEFORE, AFTER: after}, f"learner_timing_{abs(hash(ms))}")
    message = fails_with(graders.grade_barrier_timer, timing.BarrierTimer)
    assert message.startswith("a negative time") and cause in message, message


@pytest.mark.parametrize("name, before, after, message", [  # the reference: test_grade.py
    ("no_barrier_before", "self.start = time.perf_counter()", REFERENCE_AFTER,
     "no barrier before the clock: rank 1 reached backward 500 ms late and rank 0 measured"),
    ("no_barrier_after", REFERENCE_BEFORE, "self.ms = (time.perf_counter() - self.start) * 1e3",
     "no barrier before stopping the clock: rank 1 finished backward 500 ms late"),
    ("seconds", REFERENCE_BEFORE, REFERENCE_AFTER.replace(" * 1e3", ""), "seconds, not milliseconds"),
    ("unguarded", "dist.barrier()\nself.start = time.perf_counter()", REFERENCE_AFTER,
     "without a process group (a plain process: BarrierTimer's docstring says it still measures there) BarrierTimer raised"),
    ("blank", 'raise NotDone("Block D: BarrierTimer.before_backward")', REFERENCE_AFTER,
     "not done yet: Block D: BarrierTimer.before_backward"),
    ("cuda_synchronize", "torch.cuda.synchronize()\n" + REFERENCE_BEFORE, REFERENCE_AFTER,
     "BarrierTimer makes a CUDA call (torch.cuda.set_device or .synchronize, .cuda(), .to(rank))"),
    ("synchronize_for_barriers", "if torch.cuda.is_available():\n    torch.cuda.synchronize()\n"
     "self.start = time.perf_counter()", "if torch.cuda.is_available():\n    torch.cuda.synchronize()\n"
     "self.ms = (time.perf_counter() - self.start) * 1e3", "no barrier before the clock: rank 1 reached backward"),
    ("clock_outside_the_barriers", "self.start = time.perf_counter()\nif dist.is_initialized():\n    dist.barrier()",
     REFERENCE_AFTER, "no barrier before the clock: rank 1 reached backward 500 ms late"),
    ("precedence", REFERENCE_BEFORE, REFERENCE_AFTER.replace("(time.perf_counter() - self.start) * 1e3",
                                                             "time.perf_counter() - self.start * 1e3"),
     "a negative time: around a 200 ms backward the timer measured -"),
    ("cpu_clock", REFERENCE_BEFORE.replace("perf_counter", "process_time"),
     REFERENCE_AFTER.replace("perf_counter", "process_time"), "the clock missed the wait: around a 200 ms sleep"),
    ("another_form", "if dist.is_initialized():\n    dist.all_reduce(torch.zeros(1))  # returns once all ranks sent\n"
     "self.start = time.time()", "if dist.is_initialized():\n    dist.monitored_barrier()\n"
     "self.ms = 1000 * (time.time() - self.start)", None),
])
def test_barrier_timer_graded_in_two_processes(learner_modules, name, before, after, message):
    timing = learner_modules(TIMING, {BEFORE: before, AFTER: after}, f"learner_timing_{name}")
    if message is None:  # a right answer in another form (the reference: test_grade.py)
        assert graders.grade_barrier_timer(timing.BarrierTimer).startswith("Block D variant A: correct.")
    else:
        assert fails_with(graders.grade_barrier_timer, timing.BarrierTimer).startswith(message)


# ------------------------------------------------------------------------------------------------
# Block A: ddp.py's five functions, written by the learner in the student tree, graded in a real 2-process run

DDP = "src/minitrain/ddp.py"
REFERENCE_A = learner.solutions(DDP)
RETURN = "return dist.get_rank(), dist.get_world_size()"
GUARDED_INIT = "if not dist.is_initialized():\n    dist.init_process_group({})\n" + RETURN


def block_a(**learners: str) -> dict[str, str]:
    """The reference's Block A with the learner's code for some functions (name -> code)."""
    return {**REFERENCE_A, **{f"Block A: {name}": code for name, code in learners.items()}}


ANOTHER_FORM = block_a(  # right: torchrun's address written out, the rank read from its variables, and so on
    init_distributed=GUARDED_INIT.format(
        "'gloo', init_method=f\"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}\", "
        "rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']), **options").replace(
        RETURN, "return int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])").replace("if not", "import os\nif not"),
    is_main_process="import os\nreturn int(os.environ.get('RANK', '0')) == 0",
    barrier="if dist.is_initialized():\n    dist.all_reduce(torch.zeros(1))  # returns once every rank sent its part",
    cleanup="if dist.is_initialized():\n    dist.monitored_barrier()\n    dist.destroy_process_group()",
    wrap_for_ddp="if not dist.is_initialized():\n    raise RuntimeError('call init_distributed() first')\n"
                 "return TorchDDP(model) if bucket_cap_mb is None else TorchDDP(model, bucket_cap_mb=bucket_cap_mb)")
SKELETON = {  # the lab sheet's skeleton taken literally: "Assumes init_distributed already called", and so on
    "Block A: init_distributed": "dist.init_process_group(backend=backend)\n" + RETURN,
    "Block A: wrap_for_ddp": "return TorchDDP(model)", "Block A: is_main_process": "return dist.get_rank() == 0",
    "Block A: barrier": "dist.barrier()", "Block A: cleanup": "dist.destroy_process_group()"}


@pytest.mark.parametrize("writes, message", [
    (block_a(), "Block A: correct. Without a process group"),
    ({}, "not done yet: Block A: init_distributed, wrap_for_ddp, is_main_process, barrier, cleanup (each still raises"),
    (ANOTHER_FORM, "Block A: correct."),
    (block_a(is_main_process="return dist.get_rank() == 0"),
     "is_main_process() without a process group (a plain single process, the main one) raised ValueError: Default "
     "process group has not been initialized, please make sure to call init_process_group; check "
     "dist.is_initialized() before dist.get_rank()"),
    (SKELETON, "wrap_for_ddp() without a process group must raise RuntimeError naming init_distributed (call it first), but "
     "it raised ValueError: Default process group has not been initialized"),
    (block_a(init_distributed="dist.init_process_group(backend, **options)\n" + RETURN),
     "init_distributed() called a second time raised ValueError: trying to initialize the default process group "
     "twice!; calling it again must join nothing new: check dist.is_initialized() first"),
    (block_a(init_distributed=GUARDED_INIT.format("backend")),
     "the process group's timeout is 0:30:00, not the 0:01:05 that prepare_rank's options set"),
    (block_a(wrap_for_ddp=REFERENCE_A["Block A: wrap_for_ddp"].replace("TorchDDP(model,", "TorchDDP(model, "
                                                                       "device_ids=[dist.get_rank()],")),
     "wrap_for_ddp() passes device_ids to DistributedDataParallel, which is for a model on GPUs"),
    (block_a(init_distributed=GUARDED_INIT.format("'nccl', **options")),
     "init_distributed() uses the nccl backend, which needs NVIDIA GPUs"),
    (block_a(init_distributed="import os\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
             + REFERENCE_A["Block A: init_distributed"]),
     "init_distributed() makes a CUDA call (torch.cuda.set_device or .synchronize, .cuda(), .to(rank)) and this "
     "torch has no GPU to use"),
    (block_a(barrier="pass"), "barrier() did not wait: rank 1 called it 0.5 s late"),
    (block_a(cleanup="if dist.is_initialized():\n    dist.destroy_process_group()"),
     "cleanup() did not wait for every rank: rank 1 called it 0.5 s late"),
], ids=["reference", "blank", "another form", "hurried is_main_process", "the sheet's skeleton",
        "init_distributed unguarded", "prepare_rank's options dropped", "GPU: device_ids", "GPU: nccl",
        "GPU: cuda.set_device", "barrier that does nothing", "cleanup without its barrier"])
def test_block_a_graded_in_two_processes(learner_modules, writes, message):
    """The learner's regions of ddp.py (a blank stub where none is written), graded as notebook 03 grades them."""
    ddp = learner_modules(DDP, writes, f"learner_ddp_{abs(hash(str(writes)))}")
    if message.startswith("Block A: correct."):
        assert graders.grade_block_a(ddp).startswith(message)
    else:
        assert fails_with(graders.grade_block_a, ddp).startswith(message)


WRAP_GUARDED = "if not dist.is_initialized():\n    raise RuntimeError('call init_distributed() first')\n"
UNGUARDED_STATE = "process group has not been initialized"


@pytest.mark.parametrize("writes, messages", [
    (block_a(  # a hurried learner's shortcuts
        init_distributed=GUARDED_INIT.format("backend, **options").replace(
            RETURN, "import os\nreturn os.environ['RANK'], os.environ['WORLD_SIZE']"),
        wrap_for_ddp=WRAP_GUARDED + "return TorchDDP(model, bucket_cap_mb=bucket_cap_mb or 25)  # 25 MiB, DDP's own",
        cleanup="dist.barrier()\ndist.destroy_process_group()"),
     ["cleanup() without a process group, where it must do nothing, raised ValueError: Default " + UNGUARDED_STATE,
      "init_distributed() with torchrun's variables set returned ('0', '2') on rank 0 of 2: return (rank, world_size), two ints: "
      "(0, 2) (os.environ's values are strings: int() them)",
      "wrap_for_ddp(model) changed DDP's own bucket caps (25 MiB first, then 25 MiB): with bucket_cap_mb=None, pass "
      "bucket_cap_mb=None on",
      "cleanup() called a second time, after leaving the group, raised ValueError: Default " + UNGUARDED_STATE]),
    (block_a(  # a multi-node tutorial's address, and a GPU tutorial's .to(local_rank)
        init_distributed=GUARDED_INIT.format(
            "backend, init_method='tcp://127.0.0.1:29500', rank=int(os.environ['RANK']), "
            "world_size=int(os.environ['WORLD_SIZE']), **options").replace("if not", "import os\nif not"),
        wrap_for_ddp="import os\nmodel = model.to(int(os.environ.get('LOCAL_RANK', 0)))\n" + WRAP_GUARDED
                     + "return TorchDDP(model, bucket_cap_mb=bucket_cap_mb)"),
     ["wrap_for_ddp() makes a CUDA call (torch.cuda.set_device or .synchronize, .cuda(), .to(rank)) and this torch "
      "has no GPU to use: the lab runs on CPUs, drop it (RuntimeError: Cannot access accelerator device",
      "init_distributed() joins at an address of its own, init_method='tcp://127.0.0.1:29500', not the one torchrun "
      "gives this run (MASTER_ADDR:MASTER_PORT, here 127.0.0.1:"]),
    (block_a(  # a GPU tutorial's local_rank, and its broadcast_buffers=False
        init_distributed=GUARDED_INIT.format("backend, **options").replace(
            RETURN, "import os\nreturn int(os.environ['LOCAL_RANK']), dist.get_world_size()"),
        is_main_process="import os\nreturn int(os.environ.get('LOCAL_RANK', 0)) == 0",
        wrap_for_ddp=WRAP_GUARDED + "return TorchDDP(model, bucket_cap_mb=bucket_cap_mb, broadcast_buffers=False)"),
     ["init_distributed() with torchrun's variables set returned (0, 2) on rank 1 of 2: return (rank, world_size), two ints: (1, 2) "
      "(0 is its LOCAL_RANK",
      "is_main_process() returned True on rank 1 too: the main process is rank 0 of the whole group",
      "wrap_for_ddp(model) sets broadcast_buffers=False (or forward_sync_buffers, its newer name); the sheet asks for "
      "PyTorch's defaults (broadcast_buffers="
      "True)"]),
    (block_a(wrap_for_ddp=WRAP_GUARDED + "return TorchDDP(model)"),  # the sheet's wrap_for_ddp(model), guarded
     ["wrap_for_ddp(model, 1) gave buckets of 1 MiB first, then 25 MiB: pass bucket_cap_mb on to "
      "DistributedDataParallel"]),
], ids=["hurried", "an address of its own", "GPU: local_rank and broadcast_buffers", "the sheet's wrap_for_ddp(model)"])
def test_block_a_names_every_mistake_of_a_run(learner_modules, writes, messages):
    """Mistakes in several of Block A's functions at once (a run takes seconds): one run names every one, the
    first on the first line."""
    ddp = learner_modules(DDP, writes, f"learner_ddp_{abs(hash(str(writes)))}")
    named = fails_with(graders.grade_block_a, ddp).split("\nalso: ")
    assert len(named) == len(messages) and all(n.startswith(m) for n, m in zip(named, messages)), named
