"""Re-make every committed measurement in one sitting: the deeper measurements, then `make lab`.

    python -m minitrain.measure.sitting [--busy-ok]

One boot of one machine, in a row, each in a fresh interpreter, nothing else running: the numbers
the notebooks compare then come from the same machine in the same state (provenance's `sitting`).
The deeper measurements go first, so the manifest that `make lab` writes cites their new findings;
then every notebook, 01-16, is executed against the new results, and the teacher's rubric quotes the
new manifest. About 25 minutes on 2 logical CPUs.
"""

import importlib.util
import subprocess
import sys
import time

from minitrain.cli import LabArgumentParser
from minitrain.lab.reporting.sittings import committed_sittings
from minitrain.lab.running.load import busy_sentence, measure_load
from minitrain.paths import BEYOND_DIR, REPO, relative

BENCH = relative(BEYOND_DIR / "allreduce_bench.json")
# the committed measurements, in order: the benchmark first, since wire and buckets predict from its fit
COMMANDS = [
    ["-m", "minitrain.measure.allreduce_bench"],
    ["-m", "minitrain.measure.wire", "--bench", BENCH],
    ["-m", "minitrain.measure.buckets", "--bench", BENCH],
    ["-m", "minitrain.measure.control_runs"],
    ["-m", "minitrain.measure.scaling_matrix"],
    ["-m", "minitrain.measure.compression"],
    ["-m", "minitrain.measure.restart"],
    ["-m", "minitrain.measure.two_hosts"],
    ["-m", "minitrain.measure.scratch"],
]
LAB = ["-m", "minitrain.lab", "--all-notebooks", "--commit"]  # make lab's runs into experiments/, notebooks 01-16, the checker
TEACHER = ["-m", "minitrain.lab.teacher"]  # the rubric's figures from the new manifest, the key's quotes, TEACHER.md's times


def main(argv: list[str] | None = None) -> int:
    p = LabArgumentParser(prog="python -m minitrain.measure.sitting", description=__doc__.splitlines()[0])
    p.add_argument("--busy-ok", action="store_true", help="measure even though other programs keep the machine busy")
    args = p.parse_args(argv)
    if not args.busy_ok and (load := measure_load()).busy:
        p.error(f"{busy_sentence(load)}; stop them and wait a minute, or pass --busy-ok")
    started, took = time.perf_counter(), []
    kit = [TEACHER] if importlib.util.find_spec(TEACHER[1]) else []  # the student edition has no teacher's kit
    for command in [*COMMANDS, LAB, *kit]:
        print(f"\n=== python {' '.join(command)}", flush=True)
        begun = time.perf_counter()
        if subprocess.run([sys.executable, *command], cwd=REPO).returncode != 0:
            print(f"FAILED: python {' '.join(command)} (the results before it are written; re-run this command)",
                  file=sys.stderr)
            return 1
        took.append(f"{time.perf_counter() - begun:6.0f} s  python {' '.join(command)}")
    sittings = committed_sittings()
    print("\n" + "\n".join(took) + f"\nsitting: {time.perf_counter() - started:.0f} s in all")
    print("\n".join(f"{path}: {sitting}, {date}" for path, (sitting, date) in sittings.items()))
    if len({sitting for sitting, _ in sittings.values()}) > 1:
        print("FAILED: the committed results come from more than one sitting (above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
