"""`python -m minitrain.lab.grade` (`make grade`; the forkserver runs it per TODO): kept under its name; the code is
minitrain.lab.grading.gradebook."""

import sys

from minitrain.lab.grading.gradebook import main

if __name__ == "__main__":
    sys.exit(main())
