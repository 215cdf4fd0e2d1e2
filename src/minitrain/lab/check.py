"""`python -m minitrain.lab.check`: the checker's entry point, kept under its name; the code is
minitrain.lab.reporting.stop_conditions."""

import sys

from minitrain.lab.reporting.stop_conditions import main

if __name__ == "__main__":
    sys.exit(main())
