"""Block E: load both ranks' final state dicts and check they are equal (atol 1e-5).

    python experiments/35-ddp-cpu/compare_states.py [FOLDER]

Prints the largest absolute difference per tensor and overall, and whether the two are bitwise
equal; exits 1 when they are not equivalent, 2 when a file is missing or malformed.
"""

import sys
from pathlib import Path

from minitrain.cli import LabArgumentParser
from minitrain.verify import StateFileError, compare_state_files

parser = LabArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parent,
                    help="the folder holding state-rank-0.pt and state-rank-1.pt (default: this one)")
folder = parser.parse_args().folder
try:
    result = compare_state_files(folder / "state-rank-0.pt", folder / "state-rank-1.pt")
except StateFileError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
print(result.table())
sys.exit(0 if result.allclose else 1)
