"""The shape every deeper measurement shares: the registry, the command that repeats one, the results
file; and the profiler trace's overlap table on hand-made events."""

import json

import pytest

from minitrain.measure import registry
from minitrain.measure.measurement import Measurement, command_line, finding, provenance_line, write_results
from minitrain.measure.trace import ALLREDUCE, BACKWARD_OP, STEP, overlap_table
from minitrain.paths import BEYOND_DIR, DEFAULT_CORPUS_DIR, NOTEBOOKS_DIR, REPO

MEASUREMENTS = {"allreduce_bench", "scaling_matrix", "controls", "wire", "buckets", "compression", "restart",
                "two_hosts"}


def test_registry_finds_every_measurement():
    found = registry()
    assert found.keys() == MEASUREMENTS
    for name, m in found.items():
        assert m.name == name and m.result_file == f"{name}.json"
        assert (NOTEBOOKS_DIR / m.notebook).is_file(), m.notebook
        assert callable(m.run) and m.run.__module__ == f"minitrain.measure.{name}"
        assert m.figures and all(f.endswith(".png") for f in m.figures)
        assert m.title
    assert len({m.notebook for m in found.values()}) == len(found)  # one notebook each


def test_command_line_is_what_a_reader_types(tmp_path):
    assert command_line("minitrain.measure.wire", BEYOND_DIR, True, corpus_dir=None) == (
        "python -m minitrain.measure.wire --out experiments/35-ddp-cpu/beyond --quick")
    assert command_line("minitrain.measure.controls", REPO / "build" / "x", False, steps=300,
                        corpus_dir=REPO / "build" / "corpus", runs_dir=None) == (
        "python -m minitrain.measure.controls --out build/x --steps 300 --corpus-dir build/corpus")
    assert command_line("minitrain.measure.wire", BEYOND_DIR, False, corpus_dir=DEFAULT_CORPUS_DIR) == (
        "python -m minitrain.measure.wire --out experiments/35-ddp-cpu/beyond")  # the default corpus: left out
    outside = tmp_path / "my out"  # outside the repository: as given, quoted for the shell
    assert command_line("m", outside, False, gradient_bytes=4096) == f"python -m m --out '{outside}' --gradient-bytes 4096"


def test_write_results_adds_provenance_and_findings(tmp_path, corpus_dir):
    m = Measurement("demo", "A demo", "none.ipynb", lambda out, quick=False: {}, ("demo.png",))
    records = [finding("answer", 42, "things", "the number that answers it")]
    results = write_results(tmp_path, m, {"steps": 3}, records, "python -m demo --quick", 0.0, corpus_dir)
    assert json.loads((tmp_path / "demo.json").read_text()) == results
    assert results["measurement"] == "demo" and results["steps"] == 3 and results["findings"] == records
    assert records == [{"name": "answer", "value": 42, "unit": "things", "meaning": "the number that answers it"}]
    prov = results["provenance"]
    assert prov["command"] == "python -m demo --quick" and "corpus_sha256" in prov and "cores" in prov
    again = write_results(tmp_path, m, {}, [], "c", 0.0)["provenance"]
    assert "corpus_sha256" not in again
    assert len(prov["run_id"]) == 8 and again["run_id"] != prov["run_id"]  # every run its own id
    assert provenance_line(results).startswith(f"run id {prov['run_id']}, measured ")


def span(name: str, start_us: float, end_us: float) -> dict:
    """A complete ("X") Chrome-trace event from start to end, in microseconds."""
    return {"ph": "X", "name": name, "ts": start_us, "dur": end_us - start_us}


def backward(start_us: float, end_us: float) -> dict:
    return span(f"{BACKWARD_OP} AddmmBackward0", start_us, end_us)


def test_overlap_table_on_hand_made_events():
    events = [
        span(f"{STEP}0", 0, 1000),
        backward(100, 300), backward(250, 400),  # overlapping nodes: backward is 100-400
        span(ALLREDUCE, 150, 250),  # fully inside backward
        span(ALLREDUCE, 300, 500),  # half inside
        span(ALLREDUCE, 600, 700),  # after backward
        span(f"{STEP}1", 2000, 3000),
        backward(2100, 2200), backward(2300, 2400),  # a gap in backward: 2200-2300
        span(ALLREDUCE, 2150, 2350),  # 50 + 50 of its 200 us overlap
        span(f"{STEP}2", 4000, 4500),
        span(ALLREDUCE, 4100, 4200),  # no backward in this step
        span(ALLREDUCE, 9000, 9100),  # outside every step: not counted
    ]
    rows = overlap_table(events[::-1])  # the events' order in the file does not matter
    expected = [  # step, all-reduce, its ms, overlapped ms, after backward ms, backward ms
        (0, 0, 0.1, 0.1, 0.0, 0.3),
        (0, 1, 0.2, 0.1, 0.1, 0.3),
        (0, 2, 0.1, 0.0, 0.3, 0.3),
        (1, 0, 0.2, 0.1, 0.0, 0.2),
        (2, 0, 0.1, 0.0, None, 0.0),
    ]
    keys = ("step", "allreduce", "allreduce_ms", "overlapped_ms", "after_backward_ms", "backward_ms")
    assert [tuple(r[k] for k in keys) for r in rows] == [pytest.approx(e) for e in expected]
