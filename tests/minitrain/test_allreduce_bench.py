"""The gloo all-reduce benchmark: one real --quick run between 2 processes, and its arithmetic."""

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers import check_findings, check_provenance
from minitrain.launch import listening_sockets, process_tree
from minitrain.measure import allreduce_bench as bench
from minitrain.measure.allreduce import expected_sum, pattern
from minitrain.model import count_parameters
from minitrain.train import build_model_for_corpus

GRADIENT_BYTES = 1_094_016  # passed in, so the run needs no corpus
MODULE = "minitrain.measure.allreduce_bench"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """(results, output folder, listening sockets seen) of a `--quick` run into a tmp folder."""
    out, log = tmp_path_factory.mktemp("bench"), tmp_path_factory.mktemp("bench-log") / "output.txt"
    with open(log, "w") as output:  # a file, not a pipe: nothing blocks while the loop below polls
        proc = subprocess.Popen([sys.executable, "-m", MODULE, "--quick", "--out", str(out),
                                 "--gradient-bytes", str(GRADIENT_BYTES)], stdout=output, stderr=subprocess.STDOUT)
    listeners = set()
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the quick benchmark did not finish within 300 s")
        listeners.update(listening_sockets(process_tree(proc.pid)))  # store, gloo, loopback test
        time.sleep(0.05)
    assert proc.returncode == 0, log.read_text()[-3000:]
    return bench.MEASUREMENT.load(out), out, listeners


def test_every_listening_socket_is_on_loopback(quick):
    listeners = quick[2]
    assert listeners and all(listener.is_loopback for listener in listeners)


def test_result_file_has_every_field(quick):
    result, out, _ = quick
    assert {"world_size", "backend", "dtype", "timing", "warmup_iterations", "threads_per_rank",
            "result_checked", "sizes_bytes", "results", "fit", "loopback", "gradient",
            "measurement", "findings", "provenance"} <= result.keys()
    assert result["measurement"] == "allreduce_bench"
    assert tuple(result["sizes_bytes"]) == bench.Plan.quick().sizes == tuple(r["bytes"] for r in result["results"])
    for row in result["results"]:
        assert row.keys() == {"bytes", "iterations", "median_ms", "p95_ms", "mean_ms", "algbw_gbps",
                              "busbw_gbps"}
    assert {"alpha_ms", "beta_ns_per_byte", "bandwidth_gbps", "method", "max_relative_error"} <= result["fit"].keys()
    command = check_provenance(result, MODULE).command
    assert "--quick" in command and f"--gradient-bytes {GRADIENT_BYTES}" in command
    assert result["gradient"]["bytes"] == GRADIENT_BYTES
    assert (out / bench.PLOT_NAME).stat().st_size > 10_000
    assert not list(out.glob(".*"))  # no temporary file left behind by the atomic writes


def test_statistics_are_consistent(quick):
    result, _, _ = quick
    n = result["world_size"]
    for row in result["results"]:
        assert row["median_ms"] > 0 and row["p95_ms"] >= row["median_ms"]
        assert row["algbw_gbps"] == row["bytes"] / (row["median_ms"] / 1e3) / 1e9
        assert row["busbw_gbps"] == row["algbw_gbps"] * 2 * (n - 1) / n
    assert result["gradient"]["predicted_allreduce_ms"] == bench.predict_allreduce_ms(GRADIENT_BYTES, result["fit"])


def test_findings_hold_the_runs_numbers(quick):
    result = quick[0]
    fit, largest = result["fit"], result["results"][-1]
    assert result["findings"] == bench.findings(result)
    found = check_findings(result["findings"], {
        "alpha": fit["alpha_ms"], "bandwidth": fit["bandwidth_gbps"],
        "crossover": fit["alpha_ms"] / fit["beta_ns_per_byte"] * 1e6,
        "gradient_allreduce_predicted": result["gradient"]["predicted_allreduce_ms"],
        "traffic_over_loopback": result["world_size"] * largest["busbw_gbps"] / result["loopback"]["median_gbps"]})
    regime = "latency-bound" if GRADIENT_BYTES < found["crossover"].value else "bandwidth-bound"
    assert regime in found["gradient_allreduce_predicted"].meaning
    assert [found[k].unit for k in ("alpha", "bandwidth", "crossover")] == ["ms", "GB/s", "bytes"]


def test_loopback_throughput_is_positive(quick):
    loopback = quick[0]["loopback"]
    assert loopback["repeats"] == bench.Plan.quick().loopback_repeats == len(loopback["gbps"])
    assert loopback["median_gbps"] > 0 and all(g > 0 for g in loopback["gbps"])


def test_run_checked_every_sum(quick):
    # the workers compare every element with expected_sum() after every iteration and fail the run
    # otherwise; a finished run says so
    assert quick[0]["result_checked"].startswith("every element")


def test_the_result_checks_hold_and_name_a_broken_fact(quick):
    result = quick[0]
    checks = bench.result_checks(result, GRADIENT_BYTES)
    assert len(checks) == 6 and all(checks.values())  # what notebook 07's live run asserts
    assert "sizes measured are the quick plan: 4 KiB, 256 KiB, 4 MiB" in checks
    broken = result | {"gradient": result["gradient"] | {"bytes": 4}}
    assert not bench.result_checks(broken, GRADIENT_BYTES)[
        f"its gradient mark is this MiniGPT's gradients ({GRADIENT_BYTES:,} bytes)"]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_expected_sum_is_the_sum_of_the_ranks_patterns(world_size):
    numel = 1000
    total = sum(pattern(numel, rank) for rank in range(world_size))
    assert torch.equal(total, expected_sum(numel, world_size))
    assert not torch.equal(pattern(numel, 0), pattern(numel, 1))  # a rank's data matters


def test_fit_reproduces_an_exact_line():
    alpha_s, beta_s = 350e-6, 1 / 1.2e9  # 0.35 ms, 1.2 GB/s
    sizes = bench.Plan().sizes
    fit = bench.fit_alpha_beta(sizes, [alpha_s + n * beta_s for n in sizes])
    assert fit["alpha_ms"] == pytest.approx(0.35, rel=1e-9)
    assert fit["bandwidth_gbps"] == pytest.approx(1.2, rel=1e-9)
    assert bench.predict_allreduce_ms(4 * bench.MiB, fit) == pytest.approx(0.35 + 4 * bench.MiB / 1.2e6, rel=1e-9)


def test_fit_never_gives_a_negative_fixed_cost():
    sizes = bench.Plan().sizes  # the small sizes twice as fast as the line through the large: the best line has alpha < 0
    seconds = [n / 1.2e9 * (0.5 if n < 64 * bench.KiB else 1) for n in sizes]
    fit = bench.fit_alpha_beta(sizes, seconds)
    relative = lambda f: sum((bench.predict_allreduce_ms(n, f) / 1e3 / t - 1) ** 2 for n, t in zip(sizes, seconds))  # noqa: E731
    assert fit["alpha_ms"] == 0.0
    for beta in (0.9, 1.1):  # beta alone is the best relative fit through 0
        assert relative(fit) < relative(fit | {"beta_ns_per_byte": beta * fit["beta_ns_per_byte"],
                                              "bandwidth_gbps": fit["bandwidth_gbps"] / beta})


def test_bus_bandwidth_follows_nccl_tests():
    assert bench.bus_bandwidth(1.0, 2) == 1.0  # 2 ranks: each sends the whole message once
    assert bench.bus_bandwidth(1.0, 4) == 1.5
    assert bench.bus_bandwidth(1.0, 8) == 1.75


def test_default_sizes_and_iterations():
    assert bench.Plan().sizes[0] == 4 * bench.KiB and bench.Plan().sizes[-1] == 64 * bench.MiB
    assert all(b == 2 * a for a, b in zip(bench.Plan().sizes, bench.Plan().sizes[1:]))
    assert [bench.iterations(n) for n in (4 * bench.KiB, 64 * bench.MiB)] == [200, 32]


def test_gradient_bytes_are_the_default_models_parameters_in_float32(corpus_dir):
    params, nbytes = bench.minigpt_gradient_bytes(corpus_dir)
    assert params == count_parameters(build_model_for_corpus(corpus_dir, 64)[0])
    assert nbytes == 4 * params


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ring_allreduce_sums_and_sends_2_n_minus_1_over_n(world_size):
    size = 12  # divisible by 2, 3 and 4: every chunk has the same length
    inputs = [np.arange(size) * (rank + 1) + rank for rank in range(world_size)]
    results, sent = bench.ring_allreduce(inputs)
    for result in results:
        assert np.array_equal(result, sum(inputs))
    assert sent == [size * 2 * (world_size - 1) // world_size] * world_size


def test_the_reading_and_the_takeaway_follow_the_results():
    """The notebook's sentences carry the committed numbers, and their words change with the data."""
    import copy

    full = bench.MEASUREMENT.load()
    fit, n, largest = full["fit"], full["world_size"], full["results"][-1]
    text = bench.reading(full) + bench.takeaway(full)
    assert f"alpha = {fit['alpha_ms']:.3f} ms" in text and f"{fit['max_relative_error']:.0%} (at " in text
    assert f"alpha {fit['alpha_ms']:.3f} ms" in bench.report(full)  # one precision for alpha, table and takeaway
    assert "likely too" not in text  # a miss at one size says nothing about the size next to it
    # like for like: every rank's sends cross the one loopback at once, against one stream one way
    assert bench.loopback_share(full) == n * largest["busbw_gbps"] / full["loopback"]["median_gbps"]
    together, speeds = n * largest["busbw_gbps"], full["loopback"]["gbps"]
    for words in (bench.reading(full), bench.takeaway(full)):  # the share against the stream's median and its range
        assert (f"{bench.loopback_share(full):.0%} of one raw TCP stream's median, one way" in words
                and f"{together / max(speeds):.0%}-{together / min(speeds):.0%} of its fastest and slowest" in words)
    assert "were slow" not in bench.reading(full)  # no count of slow iterations the results do not hold
    tail = bench.slow_tail(full)
    assert f"At {len(tail)} of the {len(full['results'])} sizes" in bench.reading(full)
    gap = copy.deepcopy(full)  # a tail with a gap: its sizes listed, not a range
    gap["results"][1]["p95_ms"] = gap["results"][1]["median_ms"]
    listed = ", ".join(bench.size_label(r["bytes"]) for r in bench.slow_tail(gap))
    assert f"({listed}) the p95" in bench.reading(gap) and "4 KiB to" not in bench.reading(gap)
    calm = copy.deepcopy(full)
    for row in calm["results"]:
        row["p95_ms"], row["mean_ms"] = 1.5 * row["median_ms"], 1.1 * row["median_ms"]
    assert "no group of much slower iterations" in bench.reading(calm)
    flat = copy.deepcopy(full)  # a fit with no fixed cost: neither text prints an alpha
    flat["fit"] |= {"alpha_ms": 0.0}
    assert "no fixed cost above 0" in bench.takeaway(flat) and "fixed alpha =" not in bench.takeaway(flat)
    assert "no fixed cost above 0" in bench.reading(flat)


def test_the_fit_stands_beside_notebook_10s_run_of_the_same_bytes():
    """The fit is set against notebook 10's stand-alone timing of the same gradients, with how far apart
    the two runs were; agreement and different bytes each get their own sentence."""
    import copy

    from minitrain.measure import wire

    full, ten = bench.MEASUREMENT.load(), wire.MEASUREMENT.load()
    alone, fit_ms = ten["allreduce_ms"]["standalone"], full["gradient"]["predicted_allreduce_ms"]
    assert sum(b["bytes"] for b in ten["buckets"]) == full["gradient"]["bytes"]
    text = bench.against_another_run(full, ten)
    assert f"| {alone:.2f} |" in text and f"| {fit_ms:.2f} |" in text
    nearest = min(full["results"], key=lambda r: abs(r["bytes"] - full["gradient"]["bytes"]))
    median, line = nearest["median_ms"], bench.predict_allreduce_ms(nearest["bytes"], full["fit"])
    if abs(alone / median - 1) >= 0.05:  # run against run: the stand-alone time against the benchmark's median
        assert f"{abs(alone / median - 1):.0%} {'less' if alone < median else 'more'} than that median" in text
    assert f"the fit is {abs(line / median - 1):.0%} above" in text  # the line against the median at that size
    assert f"| {line:.2f} |" in text and f"| {median:.2f} |" in text  # both numbers compared are in the table
    two = copy.deepcopy(ten)  # two buckets: every row a sum of two calls
    half = full["gradient"]["bytes"] // 2
    two["buckets"] = [{"bytes": half}, {"bytes": full["gradient"]["bytes"] - half}]
    near2 = [min(full["results"], key=lambda r: abs(np.log(r["bytes"] / b["bytes"]))) for b in two["buckets"]]
    text2 = bench.against_another_run(full, two)
    sum_median = sum(r["median_ms"] for r in near2)
    sum_line = sum(bench.predict_allreduce_ms(r["bytes"], full["fit"]) for r in near2)
    assert f"| {sum_median:.2f} |" in text2 and f"| {sum_line:.2f} |" in text2 and "each row sums them" in text2
    assert f"the fit is {abs(sum_line / sum_median - 1):.0%} {'above' if sum_line > sum_median else 'below'}" in text2
    near = copy.deepcopy(ten)
    near["allreduce_ms"]["standalone"] = 1.01 * median
    assert "agrees with that median within 5%" in bench.against_another_run(full, near)
    other = copy.deepcopy(ten)
    other["buckets"].append({"bytes": 4})
    assert "nothing to compare" in bench.against_another_run(full, other)
    assert bench._apart("2026-12-02T00:35:31+00:00", "2026-12-02T00:35:47+00:00") == "16 s later"
    assert bench._apart("2026-12-02T03:35:31+00:00", "2026-12-02T00:35:31+00:00") == "3 hours earlier"
