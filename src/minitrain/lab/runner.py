"""`python -m minitrain.lab.runner`, the same as `python -m minitrain.lab`: kept under its name; the code is
minitrain.lab.running.make_lab."""

import sys

from minitrain.lab.running.make_lab import main

if __name__ == "__main__":
    sys.exit(main())
