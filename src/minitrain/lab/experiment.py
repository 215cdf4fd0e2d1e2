"""`python -m minitrain.lab.experiment`: the whole experiment's entry point, kept under its name; the code is
minitrain.lab.running.whole_experiment."""

import sys

from minitrain.lab.running.whole_experiment import main

if __name__ == "__main__":
    main()
