"""The stop-condition checker, on a real short experiment and on tampered copies of it."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from helpers import run_module
from minitrain.lab.check import OUTCOMES, check_folder, main

CONDITIONS = ["files", "equivalence", "allreduce timing", "lesson notes", "ddp tests"]


@pytest.fixture(scope="module")
def run_folder(corpus_dir, tmp_path_factory) -> Path:
    """One real experiment (the sheet's 1- and 2-process runs and 1 repeat of each, 12 steps, 4 warm-up)
    into a temporary folder."""
    out = tmp_path_factory.mktemp("experiment")
    run_module("minitrain.lab.experiment", "--out", str(out), "--steps", "12", "--warmup", "4", "--repeats", "1",
               "--corpus-dir", str(corpus_dir))  # the session's corpus, not the repo's
    return out


@pytest.fixture
def tampered(run_folder, tmp_path) -> Path:
    """A copy of the real run that one test may tamper with."""
    return Path(shutil.copytree(run_folder, tmp_path / "run"))


def failures(folder: Path) -> dict[str, str]:
    """Failed condition -> detail, without the slow ddp tests."""
    return {r.name: r.detail for r in check_folder(folder, run_tests=False) if not r.passed}


def edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def edit_state(path: Path, edit: Callable[[dict, str], None]) -> str:
    """Apply `edit(state, name)` to the first tensor of a state file; return its name."""
    state = torch.load(path, weights_only=True)
    name = next(iter(state))
    edit(state, name)
    torch.save(state, path)
    return name


def test_real_run_passes(run_folder):
    results = check_folder(run_folder, run_tests=False)
    assert [r.name for r in results] == CONDITIONS
    assert all(r.passed for r in results), [(r.name, r.detail) for r in results]
    assert results[-1].skipped and results[-1].status == "SKIPPED"


@pytest.mark.parametrize("body, status, detail", [
    ("def test_ok():\n    assert True\n", "PASS", "1 passed"),
    ("def test_broken():\n    assert 1 == 2\n", "FAIL", "FAILED"),
], ids=["passing", "failing"])
def test_ddp_tests_row_runs_the_tests(run_folder, tmp_path, monkeypatch, body, status, detail):
    """The row runs a real pytest on the DDP test file and reports it (here a small stand-in file:
    the suite runs tests/minitrain/test_ddp.py itself; `make lab` runs the real row)."""
    stand_in = tmp_path / "test_stand_in.py"
    stand_in.write_text(body)
    monkeypatch.setattr("minitrain.lab.check.DDP_TESTS", stand_in)
    ddp = check_folder(run_folder)[-1]
    assert (ddp.name, ddp.status) == ("ddp tests", status)
    assert detail in ddp.detail


def perturb(state: dict, name: str) -> None:
    state[name] = state[name] + 1e-3


def drop(state: dict, name: str) -> None:
    del state[name]


def reshape(state: dict, name: str) -> None:
    state[name] = state[name].flatten()[1:]


def poison(state: dict, name: str) -> None:
    state[name].view(-1)[0] = float("nan")


@pytest.mark.parametrize("edit, expected", [
    (perturb, "the ranks' states differ"),
    (drop, "only in the first"),
    (reshape, "against"),
    (poison, "NaN"),
])
def test_tampered_state_fails_equivalence(tampered, edit, expected):
    name = edit_state(tampered / "state-rank-1.pt", edit)
    failed = failures(tampered)
    assert failed.keys() == {"equivalence"}
    assert expected in failed["equivalence"] and repr(name) in failed["equivalence"]


def test_unreadable_state_file_fails_equivalence(tampered):
    (tampered / "state-rank-0.pt").write_bytes(b"not a state dict")
    assert "state-rank-0.pt is not a state file: truncated or corrupted" in failures(tampered)["equivalence"]


def test_manifest_must_agree_with_the_state_files(tampered):
    edit_json(tampered / "manifest.json",
              lambda m: m.update(bitwise_equal=not m["bitwise_equal"], max_abs_diff=0.5))
    detail = failures(tampered)["equivalence"]
    assert "manifest bitwise_equal" in detail and "manifest max_abs_diff is 0.5" in detail


@pytest.mark.parametrize("name, failing", [
    ("train.py", {"files"}),
    ("scaling.png", {"files"}),
    ("timings.jsonl", {"files", "allreduce timing"}),
    ("state-rank-1.pt", {"files", "equivalence"}),
    ("manifest.json", {"files", "equivalence", "allreduce timing", "lesson notes"}),
])
def test_missing_file_is_named(tampered, name, failing):
    (tampered / name).unlink()
    failed = failures(tampered)
    assert failed.keys() == failing
    assert all(name in detail for detail in failed.values())


def test_unparseable_manifest_fails_cleanly(tampered):
    (tampered / "manifest.json").write_text('{"lab": "01-ddp-on-cpu",')
    failed = failures(tampered)
    assert failed.keys() == {"equivalence", "allreduce timing", "lesson notes"}
    assert all("manifest.json is not valid JSON" in detail for detail in failed.values())


@pytest.mark.parametrize("field, value, failing, named", [
    ("model_params", "<filled in>", {"allreduce timing"}, "model_params holds the placeholder '<filled in>'"),
    ("allreduce_p95_ms", "<filled in>", {"allreduce timing"}, "allreduce_p95_ms holds the placeholder"),
    ("byte_equivalent", "<true/false>", {"equivalence", "allreduce timing"}, "byte_equivalent holds"),
    ("lesson_notes", "<the paragraph>", {"allreduce timing", "lesson notes"}, "lesson_notes holds"),
    ("tokens_per_sec_1proc", None, {"allreduce timing", "lesson notes"}, "tokens_per_sec_1proc is null"),
], ids=["model_params", "p95", "byte_equivalent", "lesson_notes", "null"])
def test_placeholder_or_null_in_manifest_is_named(tampered, field, value, failing, named):
    edit_json(tampered / "manifest.json", lambda m: m.update({field: value}))
    failed = failures(tampered)
    assert failed.keys() == failing
    assert named in failed["allreduce timing"]


@pytest.mark.parametrize("field", ["allreduce_p50_ms", "backward_allreduce_p95_ms"])  # variants B and A
def test_statistics_must_match_the_timings(tampered, field):
    edit_json(tampered / "manifest.json", lambda m: m.update({field: m[field] * 1.01}))
    failed = failures(tampered)
    assert failed.keys() == {"allreduce timing"}
    assert failed["allreduce timing"].startswith(f"{field} is ")
    assert "timings.jsonl gives" in failed["allreduce timing"]


def test_truncated_timings_name_the_line(tampered):
    path = tampered / "timings.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))
    failed = failures(tampered)
    assert failed.keys() == {"allreduce timing"}
    assert f"timings.jsonl line {len(lines)} is not valid JSON" in failed["allreduce timing"]


def test_missing_timing_lines_are_counted(tampered):
    path = tampered / "timings.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-2]))
    detail = failures(tampered)["allreduce timing"]
    assert detail == "timings.jsonl has 10 lines, the manifest says steps = 12"


def edit_speedup(notes: str, m: dict) -> str:
    speedup = f"{m['speedup_2proc']:.2f}x"
    return notes.replace(speedup, f"{m['speedup_2proc'] + 0.5:.2f}x", 1)


def swap_outcome(notes: str, m: dict) -> str:
    other = next(words for verdict, words in OUTCOMES.items() if verdict != m["verdict"])
    return notes.replace(OUTCOMES[m["verdict"]], other, 1)


def edit_tokens(notes: str, m: dict) -> str:
    return notes.replace(f"{m['tokens_per_sec_1proc']:,.0f} for 1 process", "1,234 for 1 process", 1)


def edit_range(notes: str, m: dict) -> str:
    low = m["speedup_2proc_range"][0]
    return notes.replace(f"range {low:.2f}-", f"range {low - 0.1:.2f}-", 1)


def edit_share(notes: str, m: dict) -> str:
    share = m["allreduce_share_of_step"]
    return notes.replace(f"took {share:.0%} of a", f"took {share + 0.2:.0%} of a", 1)


def edit_threads(notes: str, m: dict) -> str:
    threads = m["threads_per_rank"]["2proc"]
    return notes.replace(f"on {threads} thread(s) against", f"on {threads + 1} thread(s) against", 1)


@pytest.mark.parametrize("edit, expected", [
    (edit_speedup, "cites speedup"),
    (swap_outcome, "cites outcome"),
    (edit_tokens, "cites tokens_1proc '1,234'"),
    (edit_range, "cites low"),
    (edit_share, "all-reduce share"),
    (edit_threads, "threads (2proc/1proc)"),
    (lambda notes, m: "2 processes were slower. " + notes, "the first sentence does not read"),
    (lambda notes, m: notes + " More words." * 100, "at most 180"),
    (lambda notes, m: "", "not a paragraph"),
], ids=["speedup", "outcome", "tokens", "range", "share", "threads", "reworded", "too long", "empty"])
def test_lesson_notes_must_cite_the_manifest(tampered, edit, expected):
    manifest = json.loads((tampered / "manifest.json").read_text())
    edited = edit(manifest["lesson_notes"], manifest)
    assert edited != manifest["lesson_notes"]
    edit_json(tampered / "manifest.json", lambda m: m.update(lesson_notes=edited))
    failed = failures(tampered)
    assert failed.keys() == {"lesson notes"}
    assert expected in failed["lesson notes"]


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m.update(verdict=next(v for v in OUTCOMES if v != m["verdict"])), "verdict is"),
    (lambda m: m.update(speedup_2proc_range=[0.01, 99.0]), "speedup_2proc_range is [0.01, 99.0]"),
    (lambda m: m["repeats"].update(speedups=[]), "no number for repeats.speedups"),
], ids=["verdict", "range", "no repeats"])
def test_verdict_and_range_must_follow_the_repeats(tampered, edit, expected):
    edit_json(tampered / "manifest.json", edit)
    failed = failures(tampered)
    assert failed.keys() == {"lesson notes"}
    assert expected in failed["lesson notes"]


def test_lesson_notes_need_not_be_regenerated_text(tampered):
    edit_json(tampered / "manifest.json",
              lambda m: m.update(lesson_notes=m["lesson_notes"] + " A note added by hand."))
    assert failures(tampered) == {}


def test_speedup_must_be_the_ratio_of_the_throughputs(tampered):
    edit_json(tampered / "manifest.json",
              lambda m: m.update(tokens_per_sec_1proc=m["tokens_per_sec_1proc"] * 2))
    detail = failures(tampered)["lesson notes"]
    assert "speedup_2proc is" in detail and "cites tokens_1proc" in detail


def test_cli_exit_status(run_folder, tampered, capsys):
    assert main([str(run_folder), "--skip-tests"]) == 0
    assert "SKIPPED" in capsys.readouterr().out
    (tampered / "scaling.png").unlink()
    assert main([str(tampered), "--skip-tests"]) != 0
    out = capsys.readouterr().out
    assert "files             FAIL     missing: scaling.png" in out
