"""The wire module: one real quick 2-process run (buckets, socket bytes, trace), and the findings
sentence on made-up numbers. No timing assertions: this machine's speed is not under test."""

import gzip
import json
import sys

import pytest

from minitrain.trace import ALLREDUCE
from minitrain.train import build_model_for_corpus
from minitrain.wire import findings_sentence, run_wire


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("wire")
    lines = []
    return out, run_wire(out, quick=True, corpus_dir=corpus_dir, echo=lines.append)


def test_buckets_hold_every_parameter_once(quick_run, corpus_dir):
    _, results = quick_run
    model, _ = build_model_for_corpus(corpus_dir, results["config"]["block_size"])
    in_buckets = [name for b in results["buckets"] for name in b["params"]]
    assert sorted(in_buckets) == sorted(name for name, _ in model.named_parameters())
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(b["bytes"] for b in results["buckets"]) == gradient_bytes == results["bytes_per_step"]["gradient"]
    # the comm hook and DDP's own record agree on the buckets and their order
    assert results["ddp_buckets"]["sizes_bytes"] == [b["bytes"] for b in results["buckets"]]
    assert results["ddp_buckets"]["params_in_order"] == in_buckets


def test_socket_bytes_match_the_ring(quick_run):
    _, results = quick_run
    measured = results["bytes_per_step"]["measured"]
    if not sys.platform.startswith("linux"):
        assert measured["sent_per_rank"] is None and "not available" in measured["source"]
        return
    assert all(sent > 0 for sent in measured["sent_per_rank"])
    assert 0.9 < measured["sent_over_theory"] < 1.5  # headers and notifications add a little


def test_traces_are_json_with_allreduce_events(quick_run):
    out, results = quick_run
    assert len(results["overlap"]["traces"]) == 2
    for name in results["overlap"]["traces"]:
        with gzip.open(out / name, "rt") as f:
            events = json.load(f)["traceEvents"]
        assert any(e.get("name") == ALLREDUCE for e in events)
    assert results["overlap"]["rows"]
    assert all(0 <= r["overlapped_ms"] <= r["allreduce_ms"] + 1e-9 for r in results["overlap"]["rows"])


def test_results_on_disk(quick_run):
    out, results = quick_run
    assert json.loads((out / "wire.json").read_text()) == json.loads(json.dumps(results))
    assert (out / "wire.png").stat().st_size > 0
    assert not list(out.glob(".*"))  # no temporary files left behind


def made_up(sent: list[float] | None, predicted: float | None) -> dict:
    return {
        "config": {"world_size": 2},
        "buckets": [{"bytes": 1_000_000}, {"bytes": 1_000_000}],
        "bytes_per_step": {"gradient": 2_000_000, "ring_theory_per_rank": 2_000_000,
                           "measured": {"sent_per_rank": sent,
                                        "sent_over_theory": None if sent is None else 1.0005}},
        "allreduce_ms": {"in_step": {"mean": 12.0}, "waiting": {"mean": 6.0}, "standalone": 3.0,
                         "in_step_over_standalone": 4.0, "waiting_share": 0.5, "predicted": predicted},
        "headroom": {"comm_share": 0.25, "step_ms_allreduce": 100.0, "step_ms_noop": 75.0},
        "overlap": {"overlapped_share": 0.1},
    }


def test_findings_sentence_words_the_numbers():
    sentence = findings_sentence(made_up([2_001_000, 2_001_000], predicted=2.5))
    for phrase in ("2.00 MB of gradients into 2 buckets", "carried 2.00 MB (1.000x theory)",
                   "12.0 ms on average, 4.0x the 3.0 ms", "alpha-beta fit: 2.5 ms",
                   "6.0 ms of it (50%) was waiting", "25% of the step (100 ms", "75 ms with the no-op hook",
                   "10% of the all-reduce overlapped backward"):
        assert phrase in sentence


def test_findings_sentence_without_counters_or_fit():
    sentence = findings_sentence(made_up(None, predicted=None))
    assert "socket counters not available on this OS" in sentence
    assert "alpha-beta" not in sentence
