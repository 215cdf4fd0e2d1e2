"""`python -m minitrain.lab.repeats` (its torchrun jobs run it too): kept under its name; the code is
minitrain.lab.running.repeats."""

import sys

from minitrain.lab.running.repeats import main

if __name__ == "__main__":
    sys.exit(main())
