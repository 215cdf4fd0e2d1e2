"""The stop-condition checker, on a real short experiment and on tampered copies of it."""

import json
import re
import shutil
import statistics
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from minitrain.lab.reporting.stop_conditions import check_folder, main
from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.paragraph import claims, figures, paragraph_problems, stated_verdicts
from minitrain.lab.reporting.report import set_lesson_notes
from minitrain.lab.reporting.verdict import verdict_over_repeats
from minitrain.lab.running.notebook_times import TIMES_FILE, lab_run, numbered_notebooks, read_times, write_times
from minitrain.lab.teaching import refresh
from minitrain.lab.teaching.reference import reference_paragraph
from minitrain.lab.teaching.rubric import RUBRIC, rubric_text
from minitrain.paths import EXPERIMENT_DIR

from helpers import EXPERIMENT_REPEATS, EXPERIMENT_STEPS, EXPERIMENT_WARMUP

CONDITIONS = ["files", "equivalence", "allreduce timing", "lesson notes", "quiet machine", "ddp tests"]


@pytest.fixture(scope="module")
def run_folder(experiment_run, tmp_path_factory) -> Path:
    """The session's real experiment (conftest.py: 12 steps, 4 warm-up, 2 repeats), copied, with the
    reference paragraph as Block G (as the reference's notebook 06 writes it)."""
    out = Path(shutil.copytree(experiment_run, tmp_path_factory.mktemp("checked") / "run"))
    set_lesson_notes(out, reference_paragraph(Manifest.read(out / "manifest.json")))
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


def test_the_manifest_records_the_command_that_made_it(experiment_run, corpus_dir):
    """The experiment's command as the session's fixture ran it (tests/minitrain/conftest.py), options and all."""
    assert Manifest.read(experiment_run / "manifest.json").command == (
        f"python -m minitrain.lab.experiment --out {experiment_run} --steps {EXPERIMENT_STEPS} --warmup "
        f"{EXPERIMENT_WARMUP} --repeats {EXPERIMENT_REPEATS} --corpus-dir {corpus_dir}")


@pytest.mark.parametrize("body, status, detail", [
    ("def test_ok():\n    assert True\n", "PASS", "1 passed"),
    ("def test_broken():\n    assert 1 == 2\n", "FAIL", "FAILED"),
], ids=["passing", "failing"])
def test_ddp_tests_row_runs_the_tests(run_folder, tmp_path, monkeypatch, body, status, detail):
    """The row runs a real pytest on the DDP test file and reports it (here a small stand-in file:
    the suite runs tests/minitrain/test_ddp.py itself; `make lab` runs the real row)."""
    stand_in = tmp_path / "test_stand_in.py"
    stand_in.write_text(body)
    monkeypatch.setattr("minitrain.lab.reporting.stop_conditions.DDP_TESTS", stand_in)
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


def test_byte_equivalent_is_named_as_the_allclose_verdict_and_the_rule_is_given(tampered, run_folder):
    """The sheet's field keeps its name; the checker says it holds the allclose verdict, and states the rule."""
    assert "allclose (|a - b| <= 1e-05 + 1e-05 x |b|, element by element)" in \
        next(r.detail for r in check_folder(run_folder, run_tests=False) if r.name == "equivalence")
    edit_json(tampered / "manifest.json", lambda m: m.update(byte_equivalent=not m["byte_equivalent"]))
    assert "manifest byte_equivalent (the sheet's name for the allclose verdict) is" in failures(tampered)["equivalence"]


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


OUTCOMES = {"faster": "2 processes were faster here", "slower": "2 processes were slower here",
            "no clear winner": "there is no clear winner on this machine"}  # the reference paragraph's words
NCCL = "Switching to NCCL would make 2 processes twice as fast."  # false, and no number check can tell


def not_a_figure(m: dict, kind: str, start: float) -> float:
    """A value of `kind` far from every figure the checker accepts for this manifest (the first of start * 1.5**k).

    A run's figures vary (a busy machine's ratios and shares spread out), so a fixed short list can run out."""
    known = figures(Manifest(**m))[kind].values()
    return next(c for c in (round(start * 1.5 ** k, 2) for k in range(200)) if all(abs(c - v) > 0.2 * v for v in known))


def wrong_ratio(m: dict) -> float:
    return not_a_figure(m, "ratio", 4.44)


def wrong_speedup(notes: str, m: dict) -> str:
    stated = f"{statistics.median(m['repeats']['speedups']):.2f}x"  # the reference states the repeats' median
    assert stated in notes
    return notes.replace(stated, f"{wrong_ratio(m):.2f}x", 1)


def swap_outcome(notes: str, m: dict) -> str:
    other = next(words for verdict, words in OUTCOMES.items() if verdict != m["verdict"])
    return notes.replace(OUTCOMES[m["verdict"]], other, 1)


def wrong_share(notes: str, m: dict) -> str:
    wrong = not_a_figure(m, "percent", 71.0)
    return re.sub(r"took [\d-]+% of a", f"took {wrong:.0f}% of a", notes, count=1)  # one share or the repeats' range


@pytest.mark.parametrize("edit, expected", [
    (wrong_speedup, lambda m: f'the paragraph states "{wrong_ratio(m):.2f}x"; the manifest\'s ratios are the repeats\' median'),
    (swap_outcome, 'the paragraph says "2 processes were'),
    (lambda notes, m: notes.replace(f"{m['tokens_per_sec_1proc']:,.0f} (1 process)", "1,234 (1 process)", 1),
     lambda m: f'the paragraph states "1,234"; the manifest\'s figures are tokens_per_sec_1proc '
               f"{m['tokens_per_sec_1proc']:,.0f}"),
    (lambda notes, m: re.sub(r": their own ratio is [\d.]+x", "", notes).replace(  # it may round to the range's end
        f"-{m['speedup_2proc_range'][1]:.2f}x", "x", 1), "the paragraph does not state speedup_2proc_range"),
    (wrong_share, "; the manifest's allreduce_share_of_step is"),
    (lambda notes, m: notes + " More words." * 100, "at most 180"),
    (lambda notes, m: "", "not a paragraph"),
], ids=["speedup", "verdict", "tokens", "range", "share", "too long", "empty"])
def test_lesson_notes_must_state_the_manifest(tampered, edit, expected):
    manifest = json.loads((tampered / "manifest.json").read_text())
    edited = edit(manifest["lesson_notes"], manifest)
    assert edited != manifest["lesson_notes"]
    edit_json(tampered / "manifest.json", lambda m: m.update(lesson_notes=edited))
    failed = failures(tampered)
    assert failed.keys() == {"lesson notes"}
    assert (expected(manifest) if callable(expected) else expected) in failed["lesson notes"]


def in_other_words(m: dict) -> str:
    """A right paragraph that shares no sentence with the reference: rounded figures, other units."""
    lo, hi = m["speedup_2proc_range"]
    verdict = {"faster": "Two processes came out ahead.", "slower": "So two processes were slower.",
               "no clear winner": "The repeats overlap, so this run cannot tell the two apart."}[m["verdict"]]
    return (f"Two processes reached {m['tokens_per_sec_2proc'] / 1e3:.1f}k tokens per second and one process "
            f"{m['tokens_per_sec_1proc']:,.0f}, a ratio of about {m['speedup_2proc']:.1f}x; across the repeats it "
            f"went from {lo:.2f}x to {hi:.2f}x. {verdict} The all-reduce, waiting for the peer included, was "
            f"{100 * m['allreduce_share_of_step']:.0f} percent of a two-process step; the rest is forward, backward "
            "and the optimizer, which each rank does in full for its own batch.")


# appended to the short paragraph, not the reference's: with no clear winner that one is near the 180 words already
@pytest.mark.parametrize("write", [in_other_words, lambda m: in_other_words(m) + " " + NCCL],
                         ids=["other words", "false cause appended"])
def test_a_paragraph_with_the_right_numbers_passes(tampered, write):
    """Content, not wording: and a false cause passes too, which is what the rubric is for."""
    edit_json(tampered / "manifest.json", lambda m: m.update(lesson_notes=write(m)))
    assert failures(tampered) == {}


COMMITTED = Manifest.read(EXPERIMENT_DIR / "manifest.json")
# the hand-written paragraphs below quote this one, an earlier sitting's: 1.06x, repeats 0.96-1.17x, no clear winner
EXAMPLE = Manifest.read(Path(__file__).parent / "example_manifest.json")


@pytest.mark.parametrize("text", [
    EXAMPLE.lesson_notes,
    "One process ran at 30,947 tokens/s and two at about 33k, so the ratio was 1.06x, but the repeats "
    "ranged from 4% slower to 17% faster (0.96x to 1.17x): no clear winner. Two processes were slightly faster "
    "at the median. The all-reduce was 6.8% of a 2-process step.",
    "2 processes: 32,836 tokens/s; 1 process: 30.9 thousand tokens/s. That is 1.1x, between 0.96 and 1.17x "
    "over the repeats, too close to call. Communication took 7% of each 2-process step.",
], ids=["reference", "percent and median", "thousand and range"])
def test_right_paragraphs_pass_on_a_manifest(text):
    assert paragraph_problems(text, EXAMPLE) == []


@pytest.mark.parametrize("text, named", [
    (EXAMPLE.lesson_notes.replace("1.06x", "1.20x"),
     'the paragraph states "1.20x"; the manifest\'s ratios are the repeats\' median 1.05 (speedup_2proc, of the median repeats: 1.06) and speedup_2proc_range 0.96-1.17: '
     "correct it"),
    (EXAMPLE.lesson_notes.replace("1.06x", "1.07x"),  # 1.061 is 1.06x: a slip of rounding shows the right one
     "correct it (speedup_2proc is 1.06x to the digits you wrote)"),
    (EXAMPLE.lesson_notes.replace("took 7%", "took 40%"),
     'the paragraph states "40%"; the manifest\'s allreduce_share_of_step is 0.068 (6.8%): correct it'),
    (EXAMPLE.lesson_notes + " It ran at 52,000 tokens/s at best.",
     'the paragraph states "52,000 tokens/s"; the manifest\'s figures are tokens_per_sec_1proc 30,947 and '
     "tokens_per_sec_2proc 32,836: correct it"),
    (EXAMPLE.lesson_notes.replace("there is no clear winner on this machine", "2 processes were faster"),
     'the paragraph says "2 processes were faster", but the repeats give "no clear winner" (1 process '
     '28,304-34,056 tokens/s, 2 processes 32,467-33,234): write e.g. "there is no clear winner: the repeats overlap"'),
    ("2 processes ran at 32,836 tokens/s against 30,947: 1.06x (repeats 0.96-1.17x); the all-reduce took 7% "
     'of the step.', 'no sentence states the verdict; the repeats give "no clear winner"'),
], ids=["ratio", "rounding", "share", "stray tokens", "wrong verdict", "no verdict"])
def test_wrong_paragraphs_are_named_on_a_manifest(text, named):
    assert named in "; ".join(paragraph_problems(text, EXAMPLE))


def test_claims_read_units_ranges_and_precision():
    found = claims("16 x 64 tokens at 41k tokens/s, 0.96-1.17x, 6.8% and 3 times as fast, 6 percent faster; "
                   "273,504 parameters, 62.4 ms, 12,000 tokens, 30.1-36.2 ms, 802 against 790. In 2026 it rained. 2 processes "
                   "ran 3 repeats at 802 tokens/s. A speedup of 1.18 (1.12 to 1.29 over the repeats), 46.9k tok/s, "
                   "12% to 29% faster, 55,368 tokens per second; the all-reduce's share was 0.115 of a step.")
    assert [(c.kind, c.value, c.unit, c.text) for c in found] == [
        ("tokens", 41000.0, 1000.0, "41k tokens/s"), ("ratio", 0.96, 0.01, "0.96"), ("ratio", 1.17, 0.01, "1.17x"),
        ("percent", 6.8, 0.1, "6.8%"), ("ratio", 3.0, 1.0, "3 times"), ("gain", 6.0, 1.0, "6 percent"),
        ("tokens", 802.0, 1.0, "802"), ("tokens", 790.0, 10.0, "790"), ("tokens", 802.0, 1.0, "802 tokens/s"),
        ("ratio", 1.18, 0.01, "1.18"), ("ratio", 1.12, 0.01, "1.12"), ("ratio", 1.29, 0.01, "1.29"),
        ("tokens", 46900.0, 100.0, "46.9k tok/s"), ("gain", 12.0, 1.0, "12%"), ("gain", 29.0, 1.0, "29%"),
        ("tokens", 55368.0, 1.0, "55,368 tokens per second"), ("percent", 11.5, 0.1, "0.115")]


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m.update(verdict=next(v for v in OUTCOMES if v != m["verdict"])), "the repeats' tokens/s give"),
    (lambda m: m.update(speedup_2proc_range=[0.01, 99.0]), "speedup_2proc_range is [0.01, 99.0]"),
    (lambda m: m["repeats"].update(speedups=[]), "no number for repeats.speedups"),
], ids=["verdict", "range", "no repeats"])
def test_verdict_and_range_must_follow_the_repeats(tampered, edit, expected):
    edit_json(tampered / "manifest.json", edit)
    failed = failures(tampered)
    assert failed.keys() == {"lesson notes"}
    assert expected in failed["lesson notes"]


NOTEBOOK_08 = "Notebook 08 measures when each side wins: model size, threads, pinning."  # the reference's last sentence


def test_lesson_notes_need_not_be_regenerated_text(tampered):
    """The reference's paragraph edited by hand (its last sentence replaced: it may be near the 180 words)."""
    assert NOTEBOOK_08 in json.loads((tampered / "manifest.json").read_text())["lesson_notes"]
    edit_json(tampered / "manifest.json",
              lambda m: m.update(lesson_notes=m["lesson_notes"].replace(NOTEBOOK_08, "A note added by hand.")))
    assert failures(tampered) == {}


def test_speedup_must_be_the_ratio_of_the_throughputs(tampered):
    edit_json(tampered / "manifest.json",
              lambda m: m.update(tokens_per_sec_1proc=m["tokens_per_sec_1proc"] * 2))
    detail = failures(tampered)["lesson notes"]
    assert "speedup_2proc is" in detail and "does not state tokens_per_sec_1proc" in detail


def test_a_missing_manifest_field_is_named(tampered):
    edit_json(tampered / "manifest.json", lambda m: m.pop("lesson_notes"))
    failed = failures(tampered)
    assert failed.keys() == {"equivalence", "allreduce timing", "lesson notes"}
    assert all("manifest.json lacks lesson_notes" in detail for detail in failed.values())


def test_cli_exit_status(run_folder, tampered, capsys):
    assert main([str(run_folder), "--skip-tests"]) == 0
    assert "SKIPPED" in capsys.readouterr().out
    (tampered / "scaling.png").unlink()
    assert main([str(tampered), "--skip-tests"]) != 0
    out = capsys.readouterr().out
    assert "files             FAIL     missing: scaling.png" in out


def manifest_value(m: Manifest, path: str) -> object:
    """A field of the manifest by its dotted path; a findings list is entered by name."""
    value: object = asdict(m)
    for key in path.split("."):
        value = next(r["value"] for r in value if r["name"] == key) if isinstance(value, list) else value[key]
    return value


def answers_of(rubric: str) -> dict[str, str]:
    """The rubric's graded answers A, B and C, by letter."""
    return dict(re.findall(r"^### Answer (\w): .*\n\n> (.+)$", rubric, re.MULTILINE))


def with_repeats(m: Manifest, steps: dict[int, list[float]]) -> Manifest:
    """`m` with the repeats' median steps (ms) replaced, and every figure derived from them made again
    as minitrain.lab.reporting.report makes it (tokens/s, ratios, verdict, the median repeats' steps and phases)."""
    tokens = {n: m.batch_size_per_rank * m.block_size * n for n in (1, 2)}  # per step, all ranks
    repeats = {f"{n}proc": [dict(r, step_p50_ms=s, tokens_per_sec=1000 * tokens[n] / s)
                            for r, s in zip(m.repeats[f"{n}proc"], steps[n])] for n in (1, 2)}
    tps = {n: [r["tokens_per_sec"] for r in repeats[f"{n}proc"]] for n in (1, 2)}
    median = {n: sorted(repeats[f"{n}proc"], key=lambda r: r["tokens_per_sec"])[(len(tps[n]) - 1) // 2] for n in (1, 2)}
    speedups = [b / a for a, b in zip(tps[1], tps[2])]
    scale = median[2]["step_p50_ms"] / m.step_p50_ms_2proc  # the 2-process phases scale with its step
    return replace(m, repeats=m.repeats | repeats | {"speedups": speedups},
                   speedup_2proc_range=[min(speedups), max(speedups)],
                   tokens_per_sec_1proc=median[1]["tokens_per_sec"], tokens_per_sec_2proc=median[2]["tokens_per_sec"],
                   speedup_2proc=median[2]["tokens_per_sec"] / median[1]["tokens_per_sec"],
                   verdict=verdict_over_repeats(tps[2], tps[1]), step_p50_ms_1proc=median[1]["step_p50_ms"],
                   step_p50_ms_2proc=median[2]["step_p50_ms"], step_breakdown_ms=m.step_breakdown_ms | {
                       "2proc": {k: v * scale for k, v in m.step_breakdown_ms["2proc"].items()}})


def repeat_steps(m: Manifest, n: int) -> list[float]:
    return [r["step_p50_ms"] for r in m.repeats[f"{n}proc"]]


def two_proc_scaled(m: Manifest, factor: float) -> Manifest:
    """`m` with every 2-process repeat's step times `factor`."""
    return with_repeats(m, {1: repeat_steps(m, 1), 2: [s * factor for s in repeat_steps(m, 2)]})


def spread_by(m: Manifest, one: float, two: float) -> Manifest:
    """`m` with each process count's repeats spread `one` and `two` times as much around their median."""
    def spread(steps: list[float], by: float) -> list[float]:
        middle = sorted(steps)[(len(steps) - 1) // 2]
        return [middle * (1 + by * (s / middle - 1)) for s in steps]
    return with_repeats(m, {1: spread(repeat_steps(m, 1), one), 2: spread(repeat_steps(m, 2), two)})


def large_allreduce(m: Manifest) -> Manifest:
    """`m` with the all-reduce at 60% of a 2-process step, forward and backward shrunk to fit the rest."""
    two = m.step_breakdown_ms["2proc"]
    fit = (0.4 * m.step_p50_ms_2proc - two["optimizer"]) / (two["forward"] + two["backward"])
    return replace(m, allreduce_share_of_step=0.6, step_breakdown_ms=m.step_breakdown_ms | {"2proc": two | {
        "forward": two["forward"] * fit, "backward": two["backward"] * fit, "all-reduce": 0.6 * m.step_p50_ms_2proc}})


def overlapped_buckets(m: Manifest) -> Manifest:
    """`m` with the gradients in 4 buckets, 65% of whose all-reduce time overlapped backward."""
    buckets = m.beyond_findings["buckets"]
    findings = [dict(f, value=0.65) if f["name"] == "overlapped_share_default" else f for f in buckets["findings"]]
    return replace(m, buckets=[{"index": i, "bytes": m.gradient_bytes // 4} for i in range(4)],
                   beyond_findings=m.beyond_findings | {"buckets": buckets | {"findings": findings}})


def test_the_committed_rubric_is_the_one_written_from_the_committed_manifest():
    """After a new `make lab`, `python -m minitrain.lab.teacher` writes it again."""
    assert RUBRIC.read_text() == rubric_text(COMMITTED), "stale rubric: run `python -m minitrain.lab.teacher`"


def test_teacher_check_names_a_stale_rubric(tmp_path, monkeypatch, capsys):
    """The rubric alone is stale: TEACHER.md's and README's times are made up-to-date with a times file of their own."""
    write_times(tmp_path, {name: 1.0 for name in numbered_notebooks()}, lab_run("python -m minitrain.lab", 2))
    monkeypatch.setattr(refresh, "TIMES", tmp_path / TIMES_FILE)
    for name, write in (("GUIDE", refresh.guide_with_times), ("README", refresh.readme_with_times)):
        copy = tmp_path / getattr(refresh, name).name
        copy.write_text(write(getattr(refresh, name).read_text(), read_times(tmp_path)))
        monkeypatch.setattr(refresh, name, copy)
    stale = tmp_path / RUBRIC.name
    stale.write_text(rubric_text(COMMITTED).replace("| `verdict` | ", "| `verdict` | not "))
    monkeypatch.setattr(refresh, "RUBRIC", stale)
    assert refresh.main(["--check"]) == 1
    assert "differs from the one written from experiments/35-ddp-cpu/manifest.json; run `python -m " \
           "minitrain.lab.teacher`" in capsys.readouterr().out
    stale.write_text(rubric_text(COMMITTED))
    assert refresh.main(["--check"]) == 0


@pytest.mark.parametrize("make", [lambda m: m, lambda m: two_proc_scaled(m, 1 / 1.3), lambda m: two_proc_scaled(m, 1.4),
                                  lambda m: spread_by(m, 0.1, 20), large_allreduce, overlapped_buckets],
                         ids=["committed", "faster", "slower", "spread", "all-reduce", "buckets"])
def test_the_rubric_quotes_its_manifest(make):
    """Every figure in the rubric's table is the manifest's, at the precision shown, and the rubric names
    the manifest's runs."""
    m = make(COMMITTED)
    text = rubric_text(m)
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", text, re.MULTILINE)
    assert len(rows) >= 20
    for path, shown in rows:
        true = manifest_value(m, path)
        if isinstance(true, (bool, str)):
            assert shown == str(true).lower() if isinstance(true, bool) else shown == true, (path, shown, true)
            continue
        for number, value in zip(shown.split(" - "), true if isinstance(true, list) else [true]):
            digits = number.replace(",", "")
            half = 0.5 * 10.0 ** -len(digits.split(".")[1]) if "." in digits else 0.5
            assert abs(float(digits) - value) <= half, f"{path} is {value}, the rubric says {shown}"
    runs = m.run_ids | {f"median {k}": v for k, v in m.repeats["median_run_ids"].items()}
    assert all(f"`{run_id}`" in text for run_id in runs.values()), f"the rubric does not name the runs {runs}"


def test_the_rubric_s_answers_are_graded_as_it_says():
    """Answers A and B pass stop condition 4 (B's false cause is the rubric's to catch); C fails it."""
    answers = answers_of(RUBRIC.read_text())
    assert answers.keys() == {"A", "B", "C"}
    assert paragraph_problems(answers["A"], COMMITTED) == []
    assert paragraph_problems(answers["B"], COMMITTED) == [] and "NCCL" in answers["B"]
    assert any(p.startswith('the paragraph says "') and f'the repeats give "{COMMITTED.verdict}"' in p
               for p in paragraph_problems(answers["C"], COMMITTED)), "answer C states no verdict the repeats contradict"


@pytest.mark.parametrize("make, verdict, flips", [
    (lambda m: two_proc_scaled(m, 1 / 1.3), "faster", [
        ("| `verdict` | no clear winner |", "| `verdict` | faster |"),
        ("so there is no clear winner", "so 2 processes were faster"),
        ("The repeats' tokens/s overlap (1 process", "Every 2-process repeat ran more tokens/s than every 1-process one"),
        ("> Two processes were faster", "> Two processes were not clearly faster"),
        ("where the repeats give no clear winner", 'where the repeats give "faster"')]),
    (lambda m: two_proc_scaled(m, 1.4), "slower", [
        ("| `verdict` | no clear winner |", "| `verdict` | slower |"),
        ("so there is no clear winner", "so 2 processes were slower"),
        ("the repeats' tokens/s overlap, so", "every 2-process repeat below every 1-process one in tokens/s, so"),
        ("> Two processes were faster", "> Two processes were not clearly slower")]),
    (lambda m: spread_by(m, 0.1, 20), "no clear winner", [
        ("(1 process 28,304-34,056 tokens/s, 2 processes 32,467-33,234)", None)]),
    (lambda m: two_proc_scaled(m, 1.1), "no clear winner", [
        ("> Two processes were faster", "> Two processes were slower"), ("because each process", "though each process"),
        ('the verdict "faster"', 'the verdict "slower"')]),
    (large_allreduce, "no clear winner", [
        ("a part of the cost, not most of it", "most of the cost"),
        ('"The all-reduce (communication) dominates"', None),
        ("Answer B: 7 of 10", "Answer B: 8 of 10"),
        ("the last sentence contradicts its weight", "Criterion 5: 1")]),
    (overlapped_buckets, "no clear winner", [
        ("at the end of backward", "during backward"),
        ('"DDP hides the all-reduce behind backward"', "in 4 buckets"),
        ("neither hidden (0.005 of it overlapped backward) nor free", "the all-reduce is not free (7% of the step)")]),
], ids=["faster", "slower", "spread", "median below 1", "all-reduce", "buckets"])
def test_the_rubric_follows_its_manifest(make, verdict, flips):
    """On another manifest, the rubric's data-dependent phrases flip, and its answers A and B still pass
    stop condition 4 while C fails it on a verdict the repeats contradict."""
    m = make(EXAMPLE)
    assert m.verdict == verdict
    old, new = (" ".join(rubric_text(manifest).split()) for manifest in (EXAMPLE, m))  # as read, not as wrapped
    for before, after in flips:
        assert before in old and before not in new, before
        assert after is None or (after in new and after not in old), after
    answers = answers_of(rubric_text(m))
    assert paragraph_problems(answers["A"], m) == []
    assert paragraph_problems(answers["B"], m) == [] and "NCCL" in answers["B"]
    assert any(p.startswith('the paragraph says "') and f'the repeats give "{m.verdict}"' in p
               for p in paragraph_problems(answers["C"], m)), "answer C states no verdict the repeats contradict"


@pytest.mark.parametrize("text, verdicts", [
    ("Across the repeats it varied. Two processes came out ahead.", {"faster"}),
    ("Two processes were faster in 2 of 3 repeats, and slower at the median; no clear winner.", {"no clear winner"}),
    ("The sheet expected 2 processes to be slower, but 1 process was slower here.", {"faster"}),
    ("2 processes were not faster; 2 processes lost.", {"slower"}),
    ("With NCCL 2 processes would be faster.", set()),
    ("2 processes were faster in every repeat.", {"faster"}),
    ("So 2 processes were 4.10x faster (repeats 2.70-4.39x): the verdict is faster.", {"faster"}),
    ("The 2-process run was faster.", {"faster"}),
    ("DDP with 2 ranks outperformed one process; the single process lost.", {"faster"}),
    ("The verdict: slower. One process beat two ranks, and the 2-process run was behind.", {"slower"}),
    ("In one repeat the single process beat 2 processes (0.67x).", set()),
    ("The single process beat 2 processes (0.67x), in the second repeat.", set()),
    ("2 processes win while a rank's step stays under twice the single process's.", set()),
    ("2 processes were 3% ahead at the median, but the repeats overlap.", {"no clear winner"}),
])
def test_the_verdict_a_paragraph_states(text, verdicts):
    assert stated_verdicts(text).keys() == verdicts


@pytest.mark.parametrize("written, true, right", [
    ("1.1x", 1.061, True), ("about 1.06x", 1.061, True), ("1.07x", 1.061, False), ("1x", 1.061, False),
    ("1.20x", 1.061, False), ("0.3x", 0.265, True), ("41k tokens/s", 41_234, True), ("41,000 tokens/s", 41_234, True),
    ("0.9k tokens/s", 856, True), ("40,000 tokens/s", 32_836, False), ("7%", 6.82, True), ("6%", 6.82, False),
    ("10%", 6.82, False), ("6.5%", 6.82, False),
])
def test_a_number_is_right_at_the_precision_it_is_written_in(written, true, right):
    """Rounded to the digits written, not cut off: 6.82% is 7% (or 6.8%), not 6%."""
    [claim] = claims(written)
    assert claim.matches(true) is right


def test_completion_names_each_row_that_is_not_a_pass():
    from minitrain.lab.reporting.stop_conditions import CheckResult, completion
    passed, skipped, failed = CheckResult("files", True, ""), CheckResult("ddp tests", True, "", skipped=True), \
        CheckResult("lesson notes", False, "")
    assert completion([passed]) == "lab complete"
    assert completion([passed, skipped, failed]) == \
        "not complete: lesson notes FAIL, ddp tests SKIPPED (the full check: make lab)"
    assert completion([passed, skipped]) == \
        "no row run here fails; not run here: ddp tests (the full check: make lab)"
