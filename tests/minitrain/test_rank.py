"""One DDP rank (minitrain.rank.DDPRank) in a real 2-process gloo group: the ranks bitwise equal, two
ranks built from the same seed stepping alike, the hook's step counter advanced once a step, another
wrapper (notebook 15's NaiveDDP) stepped with its finish() timed."""

import json
from pathlib import Path

import pytest
import torch.distributed as dist

from minitrain.ddp import cleanup, init_distributed
from minitrain.launch import fast_start_method, spawn_workers
from minitrain.rank import DDPRank, StepRecord
from minitrain.scratch_ddp import NaiveDDP
from minitrain.comm_hook import InstrumentedHook
from minitrain.timing import HookTimer
from minitrain.verify import compare_states

STEPS = 3


def rank_worker(corpus_dir: str, out: str) -> None:
    """Five ranks of the lab's model side by side in each process, stepped in turn: two alike, one
    with small buckets, one with no Python comm hook, one wrapped in NaiveDDP; each process notes what they recorded."""
    rank, world_size = init_distributed("gloo")
    ranks = {"a": DDPRank(rank, world_size, Path(corpus_dir)), "b": DDPRank(rank, world_size, Path(corpus_dir)),
             "small": DDPRank(rank, world_size, Path(corpus_dir), bucket_cap_mb=0.1),
             "bare": DDPRank(rank, world_size, Path(corpus_dir), instrumented=False),
             "naive": DDPRank(rank, world_size, Path(corpus_dir), wrap=NaiveDDP, instrumented=False)}
    records = {name: [] for name in ranks}
    for _ in range(STEPS):
        for name, trainer in ranks.items():
            records[name].append(trainer.step())
    states = [None] * world_size
    dist.all_gather_object(states, {k: v.detach().clone() for k, v in ranks["a"].model.state_dict().items()})
    note = {"ranks_equal": compare_states(*states).bitwise_equal,
            "a_equals_b": compare_states(ranks["a"].model.state_dict(), ranks["b"].model.state_dict()).bitwise_equal,
            "naive_equals_bare": compare_states(ranks["naive"].model.state_dict(),
                                                ranks["bare"].model.state_dict()).bitwise_equal,
            "hook_steps": {n: r.hook.step for n, r in ranks.items() if r.hook},
            "records": {n: [{"loss": r.loss, "allreduce_ms": r.allreduce_ms, "buckets": len(r.events),
                             "event_steps": sorted({e["step"] for e in r.events}),
                             "parts_ms": r.forward_ms + r.backward_ms + r.optimizer_ms, "step_ms": r.step_ms,
                             "backward_ms": r.backward_ms, "finish_ms": r.finish_ms}
                            for r in rs] for n, rs in records.items()}}
    Path(out, f"rank-{rank}.json").write_text(json.dumps(note))
    cleanup()


@pytest.fixture(scope="module")
def notes(tmp_path_factory, corpus_dir) -> list[dict]:
    out = tmp_path_factory.mktemp("rank")
    spawn_workers(rank_worker, 2, str(corpus_dir), str(out), start_method=fast_start_method())
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


def test_the_ranks_stay_bitwise_equal(notes):
    assert all(note["ranks_equal"] for note in notes)


def test_two_ranks_from_the_same_seed_step_alike(notes):
    for note in notes:
        a, b = note["records"]["a"], note["records"]["b"]
        assert [r["loss"] for r in a] == [r["loss"] for r in b] and note["a_equals_b"]
        assert [r["buckets"] for r in a] == [r["buckets"] for r in b] == [1] * STEPS  # the default caps: 1 bucket
        assert len({r["loss"] for r in a}) == STEPS  # it trains: the loss moves every step
    assert [r["loss"] for r in notes[0]["records"]["a"]] != [r["loss"] for r in notes[1]["records"]["a"]]  # own shards


def test_the_hook_counts_each_step_once(notes):
    for note in notes:
        assert note["hook_steps"] == {"a": STEPS, "b": STEPS, "small": STEPS}
        small = note["records"]["small"]
        assert all(r["buckets"] > 1 for r in small[1:])  # 0.1 MiB buckets, as DDP rebuilds them after step 1
        assert [r["event_steps"] for r in small] == [[s] for s in range(STEPS)]  # each step its own events


def test_a_record_holds_its_parts(notes):
    for note in notes:
        for r in note["records"]["a"]:
            assert r["allreduce_ms"] > 0 and r["step_ms"] >= r["parts_ms"] > 0
        assert all(r["allreduce_ms"] is None and r["buckets"] == 0 for r in note["records"]["bare"])
        assert all(r["finish_ms"] is None for name in ("a", "small", "bare") for r in note["records"][name])


def test_another_wrapper_steps_with_its_finish_timed(notes):
    for note in notes:
        assert note["naive_equals_bare"]  # at 2 ranks NaiveDDP's arithmetic is torch DDP's, bit for bit
        for r in note["records"]["naive"]:
            assert r["finish_ms"] > 0 and r["backward_ms"] >= r["finish_ms"]  # finish() right after backward, in it
            assert r["step_ms"] >= r["parts_ms"]
            assert r["allreduce_ms"] is None  # no instrumented hook: NaiveDDP has no comm hook to time


def test_hook_timer_and_end_step_advance_the_counter_once():
    hook = InstrumentedHook()
    hook.events = [{"step": 0, "bucket": 0, "ready": 1.0, "done": 1.003}]
    assert StepRecord(0.0, 1.0, 0.2, 0.5, 0.3, hook.end_step()).allreduce_ms == pytest.approx(3.0)
    assert hook.step == 1 and hook.events == []
    assert HookTimer(hook).pop_ms() is None and hook.step == 2  # train.py's timer: the same one place
