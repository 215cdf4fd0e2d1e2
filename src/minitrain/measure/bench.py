"""`make bench`: the project's performance figures, each a ratio of two things measured side by side
in one run (medians over interleaved repeats), printed with its method. A benchmark, not a test:
it prints figures and never fails on speed.

    python -m minitrain.measure.bench [--repeats N] [--skip-lab]
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from minitrain.cli import LabArgumentParser, positive_int
from minitrain.corpus import DEFAULT_CORPUS_DIR, ensure_corpus
from minitrain.data import make_shard
from minitrain.ddp import cleanup, init_distributed, wrap_for_ddp
from minitrain.launch import spawn_workers
from minitrain.measure import allreduce_bench, wire
from minitrain.provenance import machine_provenance
from minitrain.timing import VARIANTS, attach_instrumented_hook, timed_backward
from minitrain.train import build_model_for_corpus, seed_everything


def interleaved_medians(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Run each step function in turn, `repeats` rounds, and return each one's median seconds.

    Interleaving A, B, A, B... exposes both to the same machine load, which a shared laptop or
    CI box changes from second to second; a ratio of the medians is then fair.
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def minitrain_vs_bare_step(repeats: int, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict[str, float]:
    """One process: the package's training step (shard, model, AdamW) against a bare hand-written loop
    on the same model and a pre-made batch of the same shape."""
    ensure_corpus(corpus_dir)
    seed_everything(0)
    model, _ = build_model_for_corpus(corpus_dir, 64)
    bare_model, _ = build_model_for_corpus(corpus_dir, 64)
    bare_model.load_state_dict(model.state_dict())
    shard = make_shard(0, 1, corpus_dir)
    opt, bare_opt = (torch.optim.AdamW(m.parameters(), lr=3e-4) for m in (model, bare_model))
    inputs, targets = next(shard)

    def minitrain_step() -> None:
        model(next(shard)).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def bare_step() -> None:
        logits = bare_model((inputs, None)).logits
        F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1)).backward()
        bare_opt.step()
        bare_opt.zero_grad(set_to_none=True)

    interleaved_medians({"minitrain": minitrain_step, "bare": bare_step}, 5)  # warm-up
    return interleaved_medians({"minitrain": minitrain_step, "bare": bare_step}, repeats)


def instrumentation_worker(repeats: int, corpus_dir: str, out: str) -> None:
    """Two identical DDP models in each rank, one plain, one with the instrumented comm hook; the
    second steps with no timer, then with each timing variant alone; the steps alternate, so all
    see the same load."""
    rank, world_size = init_distributed("gloo")
    seed_everything(0)
    models = [wrap_for_ddp(build_model_for_corpus(Path(corpus_dir), 64)[0]) for _ in range(2)]
    hook = attach_instrumented_hook(models[1])
    timers = {v.name: v.attach(hook) for v in VARIANTS}
    shard = make_shard(rank, world_size, corpus_dir)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-4) for m in models]

    def step(i: int, timer_names: tuple[str, ...]) -> None:
        loss = models[i](next(shard)).loss
        timed_backward(loss, [timers[name] for name in timer_names])
        for timer in timers.values():
            timer.pop_ms()
        opts[i].step()
        opts[i].zero_grad(set_to_none=True)

    steps = {"plain": lambda: step(0, ()), "hook": lambda: step(1, ())}
    steps |= {f"hook+{v.name}": lambda v=v: step(1, (v.name,)) for v in VARIANTS}
    interleaved_medians(steps, 5)  # warm-up
    medians = interleaved_medians(steps, repeats)
    if rank == 0:
        Path(out).write_text(json.dumps(medians))
    cleanup()


def instrumentation_cost(repeats: int, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict[str, float]:
    """Median 2-process DDP step seconds: plain, with the instrumented hook, and with each timing variant."""
    ensure_corpus(corpus_dir)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "medians.txt"
        spawn_workers(instrumentation_worker, 2, repeats, str(corpus_dir), str(out))
        return json.loads(out.read_text())


def lab_wall_time() -> tuple[float, list[str]]:
    """Seconds for the whole lab (`python -m minitrain.lab`, DDP tests included) into a temporary
    folder, set-up done, and the lines where it timed its parts."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "minitrain.lab"], check=True, capture_output=True, text=True,
                              env={**os.environ, "MINITRAIN_LAB_OUT": tmp})
        parts = [line.strip() for line in done.stdout.splitlines() if re.search(r": [\d.]+ s", line)]
        return time.perf_counter() - start, parts


def main(argv: list[str] | None = None) -> None:
    p = LabArgumentParser(description="Print the project's performance figures.")
    p.add_argument("--repeats", type=positive_int, default=40, help="interleaved repeats per comparison")
    p.add_argument("--skip-lab", action="store_true", help="do not time the whole lab (a few minutes)")
    args = p.parse_args(argv)
    print(f"machine: {machine_provenance()}\n", flush=True)

    if not args.skip_lab:
        seconds, parts = lab_wall_time()
        print(f"1. lab wall time after set-up: {seconds:.0f} s (python -m minitrain.lab into a temporary "
              "folder, DDP tests included; one run); its parts:\n   " + "\n   ".join(parts) + "\n", flush=True)

    steps = minitrain_vs_bare_step(args.repeats)
    print(f"2. minitrain step vs a bare hand-written loop: {steps['bare'] / steps['minitrain']:.3f} "
          f"(bare median {steps['bare'] * 1e3:.1f} ms / minitrain median {steps['minitrain'] * 1e3:.1f} ms; "
          f"goal >= 0.95; same model and batch shape, 1 process, {args.repeats} interleaved steps)\n",
          flush=True)

    cost = instrumentation_cost(args.repeats)
    shares = ", ".join(f"{name} {cost[name] / cost['plain'] - 1:+.1%}" for name in cost if name != "plain")
    medians = " / ".join(f"{name} {ms * 1e3:.1f}" for name, ms in cost.items())
    print(f"3. timing instrumentation, cost over a plain 2-process DDP step: {shares} (goal: hook under "
          f"3%; medians in ms: {medians}; {args.repeats} interleaved steps of two identical DDP models "
          "in the same processes)\n", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        bench = allreduce_bench.run(Path(tmp))
        wire_results = wire.run(Path(tmp), bench=Path(tmp) / allreduce_bench.RESULT_NAME, echo=lambda _: None)
    ar = wire_results["allreduce_ms"]
    print(f"4. in-step all-reduce vs the stand-alone one, same bytes: {ar['in_step_over_standalone']:.1f}x "
          f"(in-step mean {ar['in_step']['mean']:.2f} ms, of which {ar['waiting_share']:.0%} waiting for "
          f"the other rank; stand-alone {ar['standalone']:.2f} ms; alpha-beta prediction "
          f"{ar['predicted']:.2f} ms; python -m minitrain.measure.wire)\n", flush=True)
    largest = bench["results"][-1]
    print(f"5. gloo bus bandwidth vs raw loopback TCP: {largest['busbw_gbps'] / bench['loopback']['median_gbps']:.2f} "
          f"(busbw {largest['busbw_gbps']:.2f} GB/s at {allreduce_bench.size_label(largest['bytes'])}, "
          f"loopback {bench['loopback']['median_gbps']:.2f} GB/s; python -m minitrain.measure.allreduce_bench)")


if __name__ == "__main__":
    main()
