"""No measured number is typed into a notebook's markdown: a learner's own run changes the numbers, so
the text that states them is generated from the results by a code cell (issue 19)."""

import re

import nbformat
import pytest

from minitrain.paths import NOTEBOOKS_DIR

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
NUMBER = r"(?<![\w.^-])\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
# A number with the unit of a measurement: a time, a bandwidth, a share, a ratio, a throughput, a load.
MEASURED = re.compile(
    NUMBER + r"(?:-\d[\d,]*(?:\.\d+)?)?"  # a range such as 0.49-0.51x
    r"(?:\s?(?:ms|µs|us|s|sec|seconds?|minutes?|GB/s|MB/s|tokens/s|nats|KiB|times)\b|\s?%|x(?![\w(]))"
    r"|\d\.\d+e[-+]\d+"  # a measured difference such as 9.4e-02
    r"|\d\.\d+ against \d"  # two measured values side by side, such as losses
    r"|\d+ of the \d+"  # a count out of a measurement's rows
    r"|load average (?:was |of )?\d")
# Numbers that are not measurements, each with its reason; matched against the text around the number.
ALLOWED = {
    "60 s collective": "the lab's collective timeout, a setting",
    "(60 s here, `MINITRAIN_COLLECTIVE_TIMEOUT`)": "the lab's collective timeout, a setting",
    "starts its backward 0.3 s late": "the hook grader's built-in delay, a setting of the grader",
    "(0.1 s by default)": "torchrun's --monitor-interval default",
    "every 0.1 s": "torchrun's --monitor-interval default",
    "(about 0.1 s under `torchrun`)": "torchrun's --monitor-interval default",
    "get 1 s to end on their own": "launch.warm.GRACE_S, a setting",
    "after 30 s": "torchrun's SIGTERM-to-SIGKILL grace period, a constant of torch",
    "a 0.1 s pause": "the two-hosts driver's pause between socket-table reads, a setting",
    "can do in weak scaling is 2x": "the ideal of weak scaling with 2 ranks, arithmetic",
    "missing from 2x": "the ideal of weak scaling with 2 ranks, arithmetic",
    "within 0.05 nats": "control_runs.learning_verdict's threshold, a setting",
    "1x for": "the ring's 2(n-1)/n factor for 2 ranks, arithmetic",
    "1.5x for 4": "the ring's 2(n-1)/n factor for 4 ranks, arithmetic",
    "approaching 2x": "the ring's 2(n-1)/n factor for many ranks, arithmetic",
    "about 10% of training": "PyTorch's documented suggestion for PowerSGD's warm-up",
    "uses 10% of its steps": "the compression run's configured warm-up share, a setting",
    "about 0.007% of the results": "the number reported in pytorch/pytorch#152300, not a measurement of the lab",
    "4 KiB to 64 MiB": "the benchmark plan's sizes, a setting",
    "100 times over": "the run's 100 steps, a setting",
    "6.1e-5": "float16's smallest normal, a property of the format",
    "round as you like: `1.2x`": "Block G's instructions: how a figure may be rounded, not a measurement",
    "40,100 tokens/s; 2 processes: 46,200 tokens/s (1.15x, repeats 1.08-1.21x)": "Block G's accepted example, made up",
    "(here 1.74x": "Block G's accepted example, made up",
    "took 9% of a 2-process step": "Block G's accepted example, made up",
}


def markdown_cells(path):
    return [(i, cell.source) for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
            if cell.cell_type == "markdown"]


def typed_numbers(text: str) -> list[str]:
    """The measured-looking numbers in `text` that no allow-list entry covers."""
    text = " ".join(text.split())
    covered = [range(m.start(), m.end()) for phrase in ALLOWED for m in re.finditer(re.escape(phrase), text)]
    return [m.group(0) for m in MEASURED.finditer(text)
            if not any(m.start() in span for span in covered)]


def test_the_scan_catches_measured_numbers_and_spares_the_allowed():
    assert typed_numbers("a median of 2.38 ms against 0.77 ms, 3.1x; 20% of it; 1.56 GB/s") == \
        ["2.38 ms", "0.77 ms", "3.1x", "20%", "1.56 GB/s"]
    assert typed_numbers("0.49-0.51x the tokens/s; 9.4e-02 after 150 steps; load average 1.4; 13 minutes") == \
        ["0.49-0.51x", "9.4e-02", "load average 1", "13 minutes"]
    assert typed_numbers("the 60 s collective timeout, atol=1e-5, 16 sequences x 64 tokens, 2 x lr, 1 MiB") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_measured_number_is_typed_into_markdown(path):
    typed = [(i, found) for i, text in markdown_cells(path) for found in typed_numbers(text)]
    assert not typed, (f"{path.name} types measured numbers into markdown (cell, number): {typed[:8]}; generate "
                       "the sentence from the results in a code cell, or add a non-measured number to ALLOWED "
                       "with its reason")


def test_every_allowed_number_is_still_in_a_notebook():
    texts = [" ".join(text.split()) for path in NOTEBOOKS for _, text in markdown_cells(path)]
    stale = [phrase for phrase in ALLOWED if not any(phrase in text for text in texts)]
    assert not stale, f"ALLOWED holds phrases no notebook has any more: {stale}; remove them"
