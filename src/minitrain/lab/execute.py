"""`python -m minitrain.lab.execute`, which `make lab` runs per notebook: kept under its name; the code is
minitrain.lab.running.execute_notebook."""

import sys

from minitrain.lab.running.execute_notebook import main

if __name__ == "__main__":
    main(sys.argv[1:])
