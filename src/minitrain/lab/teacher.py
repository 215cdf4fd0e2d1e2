"""`python -m minitrain.lab.teacher`: kept under its name, and as the mark of the reference edition that
minitrain.measure.sitting looks for; the code is minitrain.lab.teaching.refresh. The student edition has neither."""

import sys

from minitrain.lab.teaching.refresh import main

if __name__ == "__main__":
    sys.exit(main())
