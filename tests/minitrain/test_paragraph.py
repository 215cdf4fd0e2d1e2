"""Stop condition 4 on paragraphs in other people's words: paragraphs.json was written by someone who had not
read the checker, for three manifests; "named" (added here) is what the failure of a wrong one must say."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_check import COMMITTED, with_repeats

from minitrain.lab.reporting.manifest import Manifest
from minitrain.lab.reporting.paragraph import paragraph_problems

PARAGRAPHS = json.loads((Path(__file__).parent / "paragraphs.json").read_text())


def imagined(tps_1proc: list[float], tps_2proc: list[float], share: float) -> Manifest:
    """The committed manifest with the repeats' tokens/s and the all-reduce's share replaced, every figure
    derived from them made again (so that stop condition 4's own consistency checks hold)."""
    tokens = COMMITTED.batch_size_per_rank * COMMITTED.block_size  # per rank and step
    steps = {n: [1000 * n * tokens / t for t in tps] for n, tps in ((1, tps_1proc), (2, tps_2proc))}
    m = with_repeats(COMMITTED, steps)
    two = m.step_breakdown_ms["2proc"]
    return replace(m, allreduce_share_of_step=share, step_breakdown_ms=m.step_breakdown_ms | {
        "2proc": two | {"all-reduce": share * m.step_p50_ms_2proc}})


# the manifests the paragraphs' writer was given: medians, median ratio and range, share (repeats chosen to fit)
MANIFESTS = {"committed": COMMITTED,
             "no-clear-winner": imagined([44_000, 40_100, 37_500], [40_040, 41_300, 42_000], 0.09),
             "slower": imagined([46_000, 45_000, 44_000], [35_880, 36_900, 37_840], 0.14)}


@pytest.mark.parametrize("name, tps, ratio, spread, verdict", [
    ("no-clear-winner", (40_100, 41_300), 1.03, (0.91, 1.12), "no clear winner"),
    ("slower", (45_000, 36_900), 0.82, (0.78, 0.86), "slower"),
])
def test_the_imagined_manifests_are_the_ones_described(name, tps, ratio, spread, verdict):
    m = MANIFESTS[name]
    assert (round(m.tokens_per_sec_1proc), round(m.tokens_per_sec_2proc)) == tps
    assert round(m.speedup_2proc, 2) == ratio and tuple(round(r, 2) for r in m.speedup_2proc_range) == spread
    assert m.verdict == verdict


def test_there_are_enough_of_each():
    right = [p for p in PARAGRAPHS if p["right"]]
    assert len(right) >= 10 and {p["manifest"] for p in right} == set(MANIFESTS)
    assert all(p["named"] for p in PARAGRAPHS if not p["right"])


@pytest.mark.parametrize("paragraph", [p for p in PARAGRAPHS if p["right"]],
                         ids=[f"{i}-{p['manifest']}" for i, p in enumerate(PARAGRAPHS) if p["right"]])
def test_a_right_paragraph_passes(paragraph):
    assert paragraph_problems(paragraph["text"], MANIFESTS[paragraph["manifest"]]) == []


@pytest.mark.parametrize("paragraph", [p for p in PARAGRAPHS if not p["right"]],
                         ids=[f"{i}-{p['manifest']}" for i, p in enumerate(PARAGRAPHS) if not p["right"]])
def test_a_wrong_paragraph_fails_naming_its_error(paragraph):
    """One problem, and it is the planted one, with what the manifest holds instead."""
    [problem] = paragraph_problems(paragraph["text"], MANIFESTS[paragraph["manifest"]])
    assert paragraph["named"] in problem, (paragraph["error"], problem)


@pytest.mark.parametrize("index, old, new, named", [
    (21, "9%", "19%", '"19%"; the manifest\'s allreduce_share_of_step is 0.090'),
    (18, "no clear winner.", "no clear winner. In the end 2 processes were faster.",
     'says "2 processes were faster", but the repeats give "no clear winner"'),
    (24, "45,000 tokens/s", "54,000 tokens/s",
     '"54,000 tokens/s"; the manifest\'s figures are tokens_per_sec_1proc 45,000'),
    (25, "Verdict: slower.", "Verdict: no clear winner.", 'says "no clear winner", but the repeats give "slower"'),
], ids=["share", "verdict added", "tokens", "verdict"])
def test_a_right_paragraph_made_wrong_fails_naming_it(index, old, new, named):
    """The writer's wrong paragraphs are all on the committed manifest; these are on the imagined ones."""
    paragraph = PARAGRAPHS[index]
    assert paragraph["right"] and old in paragraph["text"]
    [problem] = paragraph_problems(paragraph["text"].replace(old, new, 1), MANIFESTS[paragraph["manifest"]])
    assert named in problem, problem
