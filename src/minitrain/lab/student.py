"""`python -m minitrain.lab.student` (`make student`): kept under its name; the code is
minitrain.lab.editions.student_edition."""

import sys

from minitrain.lab.editions.student_edition import main

if __name__ == "__main__":
    sys.exit(main())
