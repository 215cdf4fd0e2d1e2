"""`python -m minitrain.lab.repeats` (its torchrun jobs run it too): kept under its name; the code is
minitrain.lab.running.alternating_repeats."""

import sys

from minitrain.lab.running.alternating_repeats import main

if __name__ == "__main__":
    sys.exit(main())
