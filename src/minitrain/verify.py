"""The lab's own judge of two saved state dicts (the checker, the wrap demo, the measurements): torch.testing
decides, so the verdict stays independent of the learner's Block E (compare_states.py) and is not its answer."""

from dataclasses import dataclass
from pathlib import Path

import torch

ATOL = 1e-5  # the lab sheet's tolerance: torch.allclose(s0, s1, atol=1e-5)
RTOL = 1e-5  # torch.allclose's default, which the sheet's call keeps
CLOSE = f"|a - b| <= {ATOL:g} + {RTOL:g} x |b|, element by element"  # torch.allclose's rule with those two


class StateFileError(ValueError):
    """A state file is missing, unreadable, or does not match its peer; the message says which."""


@dataclass
class Comparison:
    per_tensor: dict[str, float]  # name -> largest absolute difference
    max_abs_diff: float
    allclose: bool  # every tensor close by CLOSE (torch.allclose at ATOL, RTOL)
    bitwise_equal: bool

    def table(self) -> str:
        """One line per tensor, then the verdict."""
        width = max(map(len, self.per_tensor))
        lines = [f"{name:<{width}}  max |diff| = {d:.3e}" for name, d in self.per_tensor.items()]
        lines.append(f"largest absolute difference: {self.max_abs_diff:.3e}")
        lines.append(f"allclose ({CLOSE}): {self.allclose}, bitwise equal: {self.bitwise_equal}")
        return "\n".join(lines)


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """Load a state dict safely (`weights_only=True`: tensors only, no pickled code)."""
    path = Path(path)
    if not path.is_file():
        raise StateFileError(f"{path} does not exist: run the experiment to produce it")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types (with long texts) for truncated or foreign files
        raise StateFileError(f"{path} is not a state file: truncated or corrupted ({type(e).__name__}); "
                             "re-run the experiment to write it again") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise StateFileError(f"{path} does not hold a dict of tensors")
    return state


def state_bytes(state: dict[str, torch.Tensor]) -> bytes:
    """A state dict as bytes: each tensor's name, dtype, shape and memory, by name. Two dicts give the same bytes
    only when they hold the same tensors bit for bit (-0.0 is not 0.0 here, as it is not in a file)."""
    return b"".join(f"{name} {t.dtype} {tuple(t.shape)}:".encode() + t.detach().cpu().contiguous().numpy().tobytes()
                    for name, t in sorted(state.items()))


def _close(x: torch.Tensor, y: torch.Tensor, atol: float) -> bool:
    """torch.allclose's rule (|x - y| <= atol + RTOL x |y|), judged by torch.testing.assert_close."""
    try:
        torch.testing.assert_close(x, y, rtol=RTOL, atol=atol)
    except AssertionError:
        return False
    return True


def compare_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = ATOL) -> Comparison:
    """Largest absolute difference per tensor (for the table), close at `atol` (torch.testing's verdict), and
    bitwise equality; StateFileError when the two do not hold the same tensors."""
    if a.keys() != b.keys():
        raise StateFileError(f"the state dicts hold different tensors: only in the first "
                             f"{sorted(a.keys() - b.keys())}, only in the second {sorted(b.keys() - a.keys())}")
    per_tensor, allclose, bitwise = {}, True, True
    for name in a:
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            raise StateFileError(f"tensor {name!r}: {tuple(x.shape)} {x.dtype} against {tuple(y.shape)} {y.dtype}")
        if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
            raise StateFileError(f"tensor {name!r} holds NaN or infinity")
        per_tensor[name] = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
        allclose &= _close(x, y, atol)
        bitwise &= state_bytes({name: x}) == state_bytes({name: y})
    return Comparison(per_tensor, max(per_tensor.values()), allclose, bitwise)


def compare_state_files(path_a: str | Path, path_b: str | Path, atol: float = ATOL) -> Comparison:
    """compare_states on two state files, loaded with weights_only=True."""
    return compare_states(load_state(path_a), load_state(path_b), atol)
