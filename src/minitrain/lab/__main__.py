"""`python -m minitrain.lab`: the whole notebook lab (what `make lab` runs)."""

import sys

from minitrain.lab.runner import main

sys.exit(main())
