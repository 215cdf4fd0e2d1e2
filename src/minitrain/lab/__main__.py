"""`python -m minitrain.lab`: the whole notebook lab (what `make lab` runs); the code is
minitrain.lab.running.make_lab."""

import sys

from minitrain.lab.running.make_lab import main

if __name__ == "__main__":
    sys.exit(main())
