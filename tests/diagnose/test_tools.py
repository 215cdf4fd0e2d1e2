"""What notebook 16 teaches about each tool, on real 2-rank runs (the lab's torchrun, gloo, a 2 s collective
timeout): a test fails when torch changes the behaviour the notebook shows."""

import inspect
import os
import re
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from minitrain.diagnose import faults
from minitrain.diagnose.tools import py_spy, run, torchfrtrace
from minitrain.gloo_setup import loopback_interface
from minitrain.hang_report import MISMATCH
from minitrain.launch.spawn import fast_start_method, spawn_workers


def line_of(text: str) -> int:
    """The line of faults.py holding `text` (the tests find the lines, not hard-code them)."""
    lines, first = inspect.getsourcelines(faults)
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_by_default_a_barrier_on_one_rank_times_out_on_both_ranks_naming_no_rank():
    outcome = run("barrier-on-one-rank")
    assert outcome.status == "failed"
    assert "Timed out waiting 2000ms" in outcome.answer


def test_faulthandler_names_each_ranks_line_at_the_timeout():
    outcome = run("barrier-on-one-rank", "faulthandler")
    assert outcome.answer == (f"rank 0 at faults.py:{line_of('dist.barrier()  # wait')} in train; "
                              f"rank 1 at faults.py:{line_of('loss.backward()')} in train")


def test_a_collective_one_rank_skips_aborts_at_once_and_hang_report_names_it():
    default = run("skipped-collective")
    assert "Received data size doesn't match expected size" in default.text
    named = run("skipped-collective", "hang_report")
    assert named.answer == (f"all_reduce {MISMATCH} at "
                            f"faults.py:{line_of('dist.all_reduce(loss.detach())')} on rank 0")


def test_detail_names_both_shapes_before_gloo_aborts():
    outcome = run("mismatched-shapes", "detail")
    found = re.fullmatch(r"rank (\d) runs ALLREDUCE \[(\d+)\], rank (\d) runs ALLREDUCE \[(\d+)\]", outcome.answer)
    assert found and {found[1], found[3]} == {"0", "1"} and found[2] != found[4], outcome.answer


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
    assert outcome.answer == "rank 0 did not reach the monitored barrier"  # stuck in backward; rank 1 skipped


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


def test_the_debug_server_binds_every_interface():
    import torch.distributed.debug as debug
    assert '_WorkerServer("::", worker_port)' in inspect.getsource(debug.start_debug_server)
