"""The shape every deeper measurement shares: the registry, the command that repeats one, the results
file; and the profiler trace's overlap table on hand-made events."""

import json

import pytest

from helpers import PROVENANCE
from minitrain.lab.reporting.results_file import Finding, Provenance, ResultsFileError, write_results_file
from minitrain.lab.reporting.sittings import sitting_note
from minitrain.lab.running.load import Load
from minitrain.measure import registry
from minitrain.measure import sitting as sitting_command
from minitrain.measure.measurement import CannotRun, Measurement, command_line, provenance_line, show_checks, write_results
from minitrain.measure.trace import ALLREDUCE, BACKWARD_OP, STEP, overlap_table
from minitrain.paths import BEYOND_DIR, DEFAULT_CORPUS_DIR, NOTEBOOKS_DIR, REPO
from minitrain.provenance import sitting

MEASUREMENTS = {"allreduce_bench", "scaling_matrix", "control_runs", "wire", "buckets", "compression", "restart",
                "two_hosts", "scratch"}


def test_registry_finds_every_measurement():
    found = registry()
    assert found.keys() == MEASUREMENTS
    for name, m in found.items():
        assert m.name == name and m.result_file == f"{name}.json"
        assert (NOTEBOOKS_DIR / m.notebook).is_file(), m.notebook
        assert m.measure.__module__ == m.module == f"minitrain.measure.{name}"  # `python -m` runs it
        assert all(callable(f) for f in (m.findings, m.plot, m.report))
        assert m.figures and all(f.endswith(".png") for f in m.figures)
        assert m.title and m.quick_help
        assert m.plan is None or m.plan.quick() != m.plan()  # Plan.quick(): the one quick plan
        assert m.worker is None or m.plan is not None  # a worker gets its plan from a file
    assert len({m.notebook for m in found.values()}) == len(found)  # one notebook each


def test_command_line_is_what_a_reader_types(tmp_path):
    assert command_line("minitrain.measure.wire", BEYOND_DIR, True, corpus_dir=None) == (
        "python -m minitrain.measure.wire --out experiments/35-ddp-cpu/beyond --quick")
    assert command_line("minitrain.measure.control_runs", REPO / "build" / "x", False, steps=300,
                        corpus_dir=REPO / "build" / "corpus", runs_dir=None) == (
        "python -m minitrain.measure.control_runs --out build/x --steps 300 --corpus-dir build/corpus")
    assert command_line("minitrain.measure.wire", BEYOND_DIR, False, corpus_dir=DEFAULT_CORPUS_DIR) == (
        "python -m minitrain.measure.wire --out experiments/35-ddp-cpu/beyond")  # the default corpus: left out
    outside = tmp_path / "my out"  # outside the repository: as given, quoted for the shell
    assert command_line("m", outside, False, gradient_bytes=4096) == f"python -m m --out '{outside}' --gradient-bytes 4096"


def test_write_results_adds_provenance_and_findings(tmp_path, corpus_dir):
    m = demo()
    records = [Finding("answer", 42, "things", "the number that answers it")]
    results = write_results(tmp_path, m, {"steps": 3}, records, "python -m demo --quick", 0.0, corpus_dir)
    assert m.load(tmp_path) == results
    written = json.loads((tmp_path / "demo.json").read_text())
    assert written["findings"] == [{"name": "answer", "value": 42, "unit": "things",
                                    "meaning": "the number that answers it"}]
    assert results["measurement"] == "demo" and results["steps"] == 3 and results["findings"] == records
    prov = results["provenance"]
    assert prov.command == "python -m demo --quick" and prov.corpus_sha256 and prov.cores >= 1
    assert prov.sitting == sitting() and written["provenance"] == prov.as_dict()
    again = write_results(tmp_path, m, {}, [], "c", 0.0)["provenance"]
    assert again.corpus_sha256 is None and "corpus_sha256" not in again.as_dict()
    assert len(prov.run_id) == 8 and again.run_id != prov.run_id  # every run its own id
    assert provenance_line(results).startswith(f"run id {prov.run_id}, measured ")
    assert f"sitting {sitting()}," in provenance_line(results)  # this boot of this machine, beside the run id


def test_sitting_note_names_the_sittings_only_when_they_differ():
    today = {"provenance": Provenance(**PROVENANCE | {"sitting": sitting()})}  # a results file's, typed
    other = {"sitting": "boot 0000abcd of Another CPU (Linux 6.1)"}  # run.json's or the manifest's
    assert sitting_note(today, dict(today)) == ""
    note = sitting_note(today, other)
    assert "2 sittings" in note and sitting() in note and "Another CPU" in note
    assert "do not record their sitting" in sitting_note({"date": "2026-11-30"})
    assert "do not record their sitting" in sitting_note({"provenance": Provenance(**PROVENANCE)})


def test_every_committed_results_file_round_trips_through_its_reader_and_writer(tmp_path):
    for name, m in registry().items():
        results = m.load()
        assert isinstance(results["provenance"], Provenance), name
        assert results["findings"] and all(isinstance(f, Finding) for f in results["findings"]), name
        assert results["provenance"].sitting, name  # every committed result names its sitting
        write_results_file(tmp_path / m.result_file, results)
        assert (tmp_path / m.result_file).read_bytes() == (BEYOND_DIR / m.result_file).read_bytes(), name


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.pop("measurement"), "it names no measurement"),
    (lambda d: d.update(measurement="buckets"), "it holds measurement 'buckets', not 'wire'"),
    (lambda d: d.update(findings={"a": 1}), "its findings are not a list"),
    (lambda d: d["findings"][0].pop("unit"), "a finding is not a record of name, value, unit and meaning"),
    (lambda d: d.update(provenance="today"), "its provenance is not an object"),
    (lambda d: d["provenance"].pop("date"), "its provenance lacks date"),
    (lambda d: d["provenance"].update(hypervisor="kvm"), "its provenance has unknown fields hypervisor"),
])
def test_a_bad_envelope_is_named_in_one_line_with_the_fix(tmp_path, change, problem):
    data = json.loads((BEYOND_DIR / "wire.json").read_text())
    change(data)
    (tmp_path / "wire.json").write_text(json.dumps(data))
    with pytest.raises(ResultsFileError) as e:
        registry()["wire"].load(tmp_path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'wire.json'}: {problem}; ")
    assert message.endswith("; re-run python -m minitrain.measure.wire, or restore the committed file from git")


def test_a_results_file_that_is_missing_or_not_json_is_named(tmp_path):
    with pytest.raises(ResultsFileError, match=r"wire.json is missing; re-run python -m minitrain.measure.wire"):
        registry()["wire"].load(tmp_path)
    (tmp_path / "wire.json").write_text("{not json")
    with pytest.raises(ResultsFileError, match=r"wire.json is not valid JSON .*; re-run python -m minitrain.measure.wire"):
        registry()["wire"].load(tmp_path)


def demo(raises: Exception | None = None) -> Measurement:
    """A measurement that measures nothing: its findings, figure and report from its options."""
    def measure(out, plan, corpus_dir, echo, answer: int = 0) -> dict:
        if raises:
            raise raises
        return {"answer": answer}

    def plot(results: dict, out) -> None:
        (out / "demo.png").write_bytes(b"png")

    return Measurement("demo", "A demo", "none.ipynb", ("demo.png",), measure,
                       lambda r: [Finding("answer", r["answer"], "things", "the number that answers it")],
                       plot, lambda r: f"the answer: {r['answer']}", "nothing at all", corpus=False,
                       options=lambda p: p.add_argument("--answer", type=int, default=0))


def test_main_runs_writes_and_says_what_it_wrote(tmp_path, capsys):
    demo().main(["--out", str(tmp_path), "--answer", "42"])
    printed = capsys.readouterr().out
    assert "the answer: 42" in printed
    assert printed.rstrip().endswith(f"wrote demo.json and demo.png to {tmp_path} in 0 s")
    results = json.loads((tmp_path / "demo.json").read_text())
    assert results["answer"] == 42
    assert results["provenance"]["command"] == f"python -m minitrain.measure.demo --out {tmp_path} --answer 42"
    assert (tmp_path / "demo.png").read_bytes() == b"png"


def test_main_says_in_one_line_why_it_cannot_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        demo(CannotRun("cannot make two network namespaces here: not root")).main(["--out", str(tmp_path)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: cannot make two network namespaces here: not root" in err
    assert not (tmp_path / "demo.json").exists()


def test_show_checks_prints_each_and_fails_naming_the_broken_one(capsys):
    show_checks({"the ranks agree": True, "the bytes halve": True})
    assert capsys.readouterr().out == "the ranks agree: True\nthe bytes halve: True\n"
    with pytest.raises(AssertionError, match="a check of the live run failed: the bytes halve$"):
        show_checks({"the ranks agree": True, "the bytes halve": False})
    assert "the bytes halve: False" in capsys.readouterr().out


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


def test_the_sitting_remakes_every_measurement_the_benchmark_first():
    """A measurement added to the registry but not to the sitting would keep its results from another sitting."""
    modules = [command[1] for command in sitting_command.COMMANDS]
    assert sorted(modules) == sorted(f"minitrain.measure.{name}" for name in registry())
    assert modules[0] == "minitrain.measure.allreduce_bench"  # wire and buckets predict from its fit
    assert all(c[2:] == ["--bench", sitting_command.BENCH] for c in sitting_command.COMMANDS if c[1].endswith(("wire", "buckets")))


def test_the_sitting_refuses_a_busy_machine_before_measuring_anything(monkeypatch, capsys):
    # the machine's state, as minitrain.lab.running.load reads it: a load average of 3 and 2 CPUs' worth of others' work
    monkeypatch.setattr(sitting_command, "measure_load", lambda: Load(average_1min=3.0, others_now=2.0))
    monkeypatch.setattr(sitting_command.subprocess, "run", lambda *a, **k: pytest.fail("measured on a busy machine"))
    with pytest.raises(SystemExit) as e:
        sitting_command.main([])
    message = capsys.readouterr().err
    assert e.value.code == 2 and "the machine is busy (load average 3.0" in message and "--busy-ok" in message
