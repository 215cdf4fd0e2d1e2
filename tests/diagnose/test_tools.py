"""What notebook 16 teaches about each tool, on real 2-rank runs (warm ranks with torchrun's variables, gloo, a 2 s
collective timeout): a test fails when torch changes the behaviour the notebook shows."""

import inspect
import json
import os
import re
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from minitrain.diagnose import faults
from minitrain.diagnose.faults import all_reduce_sizes
from minitrain.diagnose.tools import py_spy, run, torchfrtrace
from minitrain.gloo_setup import loopback_interface
from minitrain.hang_report import MISMATCH
from minitrain.launch.spawn import fast_start_method, spawn_workers


def line_of(text: str) -> int:
    """The line of faults.train holding `text` (the tests find the lines, not hard-code them)."""
    lines, first = inspect.getsourcelines(faults.train)
    return next(n for n, line in enumerate(lines, first) if text in line)


def test_by_default_a_barrier_on_one_rank_times_out_on_both_ranks_naming_no_rank():
    outcome = run("barrier-on-one-rank")
    assert outcome.status == "failed"
    assert "Timed out waiting 2000ms" in outcome.text  # the first answer, under load: the other rank's closed peer


def test_faulthandler_names_each_ranks_line_at_the_timeout():
    outcome = run("barrier-on-one-rank", "faulthandler")
    assert outcome.answer == (f"rank 0 at faults.py:{line_of('dist.barrier()  # wait')} in train; "
                              f"rank 1 at faults.py:{line_of('loss.backward()')} in train")


def test_all_reduces_of_other_sizes_wait_return_abort_or_sum_in_part_depending_on_the_sizes():
    both = all_reduce_sizes((1, 2))  # the later rank's call may end at the earlier one's timeout, its pair closed
    assert "waits until the timeout (1 s), then raises" in both, both
    assert all(said.startswith(("waits until the timeout (1 s), then raises", "waits until the other rank's timeout "
                                "(1 s) closes the connection, then raises: Connection")) for said in both), both
    assert all_reduce_sizes((2, 3)) == ["returns its 2 floats summed", "waits until the timeout (1 s), then raises"]
    aborts, other = all_reduce_sizes((63, 64))
    assert aborts == "aborts: a message of 64 bytes where it expects at most 60"
    assert other in ("returns, 1 of its 64 floats not summed: no error",  # it had every piece before the abort
                     "raises: Connection reset by peer", "raises: Connection closed by peer"), other


def test_a_collective_one_rank_skips_aborts_at_once_and_hang_report_names_it():
    default = run("skipped-collective")
    assert "Received data size doesn't match expected size" in default.text
    named = run("skipped-collective", "hang_report")
    assert named.answer == (f"all_reduce {MISMATCH} at "
                            f"faults.py:{line_of('dist.all_reduce(loss.detach())')} on rank 0")
    assert named.names(*faults.planted("skipped-collective"))


def test_the_flight_recorder_reads_the_one_dump_left_when_a_rank_aborts():
    outcome = run("skipped-collective", "flight_recorder")
    assert re.fullmatch(r"one dump, rank 1's \(no other rank wrote one\); its last collective gloo:all_reduce; "
                        rf"sizes \[\[\d+\]\]; faults.py:{line_of('loss.backward()')}", outcome.answer), outcome.answer
    assert not outcome.names(*faults.planted("skipped-collective"))  # the survivor's line, not the mistake's


def test_detail_names_both_shapes_before_gloo_aborts():
    outcome = run("mismatched-shapes", "detail")
    found = re.fullmatch(r"rank 0 runs ALLREDUCE \[(\d+)\]; rank 1 runs ALLREDUCE \[(\d+)\]", outcome.answer)
    assert found and found[1] != found[2], outcome.answer
    assert not outcome.names(None, f"faults.py:{line_of('dist.all_reduce(kept.detach())')}")  # no line


def test_detail_reads_each_ranks_own_op_the_other_ranks_can_be_misread():
    outcome = run("barrier-on-one-rank", "detail")
    assert re.fullmatch(r"rank 0 runs BARRIER; rank 1 runs ALLREDUCE \[\d+\]", outcome.answer), outcome.answer
    assert "OpType=REDUCE" in outcome.text or "OpType=GATHER" in outcome.text  # a length decoded as an op, today


def ddp_on_a_group_detail_does_not_wrap() -> None:
    """Under DETAIL: DDP on a group made with the debug level off trains; DETAIL still checks the default group."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    dist.set_debug_level(dist.DebugLevel.DETAIL)  # TORCH_DISTRIBUTED_DEBUG=DETAIL, set here: a forkserver's child
    dist.init_process_group("gloo")  # keeps the level the server read when it started
    dist.set_debug_level(dist.DebugLevel.OFF)
    ddp_group = dist.new_group(backend="gloo")  # not wrapped: made with the level off
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    rank, model = dist.get_rank(), torch.nn.Linear(2, 1, bias=False)
    ddp = DDP(model, process_group=ddp_group)
    ddp(torch.full((1, 2), rank + 1.0)).sum().backward()
    assert model.weight.grad.tolist() == [[1.5, 1.5]]  # the mean of 1 and 2: DDP averaged across the ranks
    with pytest.raises(RuntimeError, match="Detected mismatch between collectives"):
        dist.all_reduce(torch.ones(2 + rank))
    dist.destroy_process_group()


def test_ddp_under_detail_runs_on_a_group_made_with_the_debug_level_off():
    spawn_workers(ddp_on_a_group_detail_does_not_wrap, 2, start_method=fast_start_method(), timeout_s=60)


def test_detail_with_ddp_dies_constructing_ddp():
    outcome = run("straggler", "detail_ddp")
    assert outcome.status == "failed"
    assert outcome.answer and outcome.answer.startswith("SIGSEGV"), outcome.text
    assert "in DistributedDataParallel() at distributed.py:" in outcome.answer or "(no stack printed)" in outcome.answer


def test_a_skipped_backward_slips_silently_then_the_flight_recorder_names_the_missing_rank(tmp_path):
    default = run("skipped-backward")
    assert "rank 1 done" in default.text and "Connection closed by peer" in default.answer  # no hang, no name
    outcome = run("skipped-backward", "flight_recorder", folder=tmp_path)
    assert outcome.answer.startswith("Not all ranks joining collective; missing ranks: {1}; gloo:all_reduce")
    assert outcome.answer.endswith(f"faults.py:{line_of('loss.backward()')}")
    raw = torchfrtrace(tmp_path, "fr-rank-")  # gloo's own dumps: their group named "" (tools.fr_copies)
    assert "KeyError: ('0', 0)" in raw, raw


def test_a_monitored_barrier_names_the_rank_left_behind():
    outcome = run("skipped-backward", "monitored_barrier")
    assert outcome.answer == ("rank 1 reached the monitored barrier; its exchange with rank 0 failed (check rank "
                              "0's logs)")  # rank 0 is stuck in backward, the one rank 1 skipped: all gloo says
    assert outcome.named == [(0, None)]


def late_rank_1() -> None:
    """Rank 1 comes 3 s late to a monitored barrier of 1 s: rank 0's error names it."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        time.sleep(3)
        return
    with pytest.raises(RuntimeError, match="Rank 1 failed to pass monitoredBarrier in 1000 ms"):
        dist.monitored_barrier(timeout=timedelta(seconds=1))


def test_rank_0_names_the_ranks_that_did_not_reach_the_monitored_barrier():
    spawn_workers(late_rank_1, 2, start_method=fast_start_method(), timeout_s=60)


def records_without_being_asked() -> None:
    """Three all-reduces with no Flight Recorder variable set: the dump holds them, with their Python stacks."""
    import pickle

    import torch
    assert not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & set(os.environ)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    dist.init_process_group("gloo")
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    entries = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, True, False))["entries"]
    assert [e["profiling_name"] for e in entries] == ["gloo:all_reduce"] * 3 and all(e["frames"] for e in entries)
    dist.destroy_process_group()


def test_the_flight_recorder_is_on_by_default_on_gloo(monkeypatch):
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    spawn_workers(records_without_being_asked, 2, start_method=fast_start_method(), timeout_s=60)


def test_the_profiler_names_the_straggler_and_nothing_else_does():
    assert run("straggler").answer is None
    outcome = run("straggler", "profiler")
    assert outcome.status == "finished" and outcome.answer.startswith("rank 1 arrives last")


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (optional: pip install py-spy)")
def test_py_spy_names_each_ranks_line_from_outside():
    outcome = run("barrier-on-one-rank", "py-spy")
    assert f"rank 0 at faults.py:{line_of('dist.barrier()  # wait')} in train" in outcome.answer
    assert outcome.names(*faults.planted("barrier-on-one-rank"))


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (optional: pip install py-spy)")
def test_py_spy_dumps_until_the_run_ends_a_run_that_finishes_too():
    outcome = run("straggler", "py-spy")  # 6 steps of SLOW_S on rank 1: dumped more than once before the end
    assert outcome.status == "finished"
    assert re.fullmatch(r"rank 0 at faults\.py:\d+ in \w+; rank 1 at faults\.py:\d+ in \w+", outcome.answer), outcome.answer


def test_the_debug_server_binds_every_interface():
    import torch.distributed.debug as debug
    assert '_WorkerServer("::", worker_port)' in inspect.getsource(debug.start_debug_server)


def test_the_table_counts_the_planted_rank_and_the_planted_line_apart():
    """A tool that names the rank and no line gets its rank count; one that names each rank, `each rank`; the
    Flight Recorder's single dump is said to name no mismatch."""
    from minitrain.diagnose.table import right, seconds_table

    rank, place = faults.planted("straggler")
    late = [{"answer": f"rank {r} arrives last: time in gloo:all_reduce", "seconds": 1.0} for r in (rank, 1 - rank)]
    assert right("straggler", late) == "rank 1/2, line n/a"
    each = [{"answer": f"rank 0 at faults.py:1 in train; rank 1 at {place} in train", "seconds": 1.0}]
    assert right("straggler", each) == "each rank, line 1/1"
    _, shapes = faults.planted("mismatched-shapes")
    dump = [{"answer": f"one dump, rank 1's (no other rank wrote one); its last collective gloo:all_reduce; sizes "
                       f"[[64]]; {shapes}", "seconds": 0.0}, {"answer": None, "seconds": None}]
    assert right("mismatched-shapes", dump) == ("line 1/2, one dump 1/2: the survivor's last collective, "
                                                "not the mismatch")
    results = {"runs": [{"kind": k, "tool": t, "outcomes": late} for k in faults.KINDS for t in ("none", "detail")]}
    rows = seconds_table(results).splitlines()
    assert rows[2].endswith("| 1.0 s; rank 1/2, line n/a |") and rows[3].startswith("| detail (`--plain`) |"), rows


def test_the_ranks_and_lines_read_from_the_stored_answers_are_those_their_runs_named():
    """tools.json keeps each answer and whether its run named the planted rank and line: `named` reads the same."""
    from minitrain.diagnose.table import TABLE
    from minitrain.diagnose.tools import Outcome

    for r in json.loads(TABLE.read_text())["runs"]:
        for o in r["outcomes"]:
            named = Outcome(r["kind"], r["tool"], answer=o["answer"]).names(*faults.planted(r["kind"]))
            assert named == o["names_planted"], (r["kind"], r["tool"], o["answer"])


@pytest.mark.skipif(py_spy() is not None, reason="py-spy is installed")
def test_without_py_spy_its_answer_says_how_to_install_it():
    assert run("straggler", "py-spy").answer == "py-spy not installed (pip install py-spy)"


def test_what_else_practitioners_use_as_notebook_16_says():
    """Its last table's checkable rows: faulthandler on a signal dumps and goes on; dist.breakpoint reads the terminal
    and lifts every group's timeout; NCCL's settings have nothing to act on in this build."""
    import faulthandler
    import signal
    import tempfile

    with tempfile.TemporaryFile("w+") as stacks:
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
        finally:
            faulthandler.unregister(signal.SIGUSR1)
        stacks.seek(0)
        assert "test_what_else_practitioners_use_as_notebook_16_says" in stacks.read()  # and this test went on
    source = inspect.getsource(dist.breakpoint)
    assert "_set_pg_timeout" in source and "timeout_s=3600" in source
    assert 'open("/dev/stdin")' in inspect.getsource(dist._make_distributed_pdb)
    assert not dist.is_nccl_available()
