"""Block E: load both ranks' final state dicts and check they are allclose (atol 1e-5, allclose's default rtol 1e-5).

    python experiments/35-ddp-cpu/compare_states.py [FOLDER]

Prints the largest absolute difference and whether every tensor is allclose; exits 1 when the
two are not equivalent, 2 when a file is missing or malformed.
"""

import sys
from pathlib import Path

import torch

from minitrain.cli import LabArgumentParser
from minitrain.verify import ATOL, StateFileError, load_state


def states_equivalent(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> tuple[bool, float]:
    """(equivalent, largest): equivalent is True when both hold the same names (as sets, whatever their
    order) with the same shapes and every tensor is allclose at the `atol` given; largest is the largest
    |a - b| over every element of every tensor, a float, whatever the verdict (any float when the names or
    shapes differ: float("inf"), say). An exact copy gives (True, 0.0).
    Both are returned, never asserted: main() prints them and exits 1 when the states are not equivalent."""
    ### BEGIN SOLUTION: Block E: states_equivalent
    if a.keys() != b.keys() or any(a[name].shape != b[name].shape for name in a):
        return False, float("inf")
    largest = max(((a[name].double() - b[name].double()).abs().max().item() for name in a if a[name].numel()),
                  default=0.0)
    return all(torch.allclose(a[name], b[name], atol=atol) for name in a), largest
    ### END SOLUTION


def main(argv: list[str] | None = None) -> int:
    parser = LabArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parent,
                        help="the folder holding state-rank-0.pt and state-rank-1.pt (default: this one)")
    folder = parser.parse_args(argv).folder
    try:
        s0, s1 = (load_state(folder / f"state-rank-{rank}.pt") for rank in (0, 1))
    except StateFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    equivalent, largest = states_equivalent(s0, s1, ATOL)
    print(f"largest absolute difference: {largest:.3e} (atol {ATOL:g})")
    print(f"allclose: {equivalent}")
    return 0 if equivalent else 1


if __name__ == "__main__":
    sys.exit(main())
