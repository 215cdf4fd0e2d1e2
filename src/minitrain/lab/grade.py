"""`python -m minitrain.lab.grade` (`make grade`; the forkserver runs it per TODO): kept under its name; the code is
minitrain.lab.grading.grade."""

import sys

from minitrain.lab.grading.grade import main

if __name__ == "__main__":
    sys.exit(main())
