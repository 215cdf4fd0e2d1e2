"""Writing the lab's results so that no reader ever sees half a file."""

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Let `write` fill a temporary file beside `path`, then rename it into place.

    A rename is atomic: a reader, or a run interrupted half-way, sees the old file or the new
    one, never a torn one; two processes writing the same bytes at once are harmless.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: Path, obj: object) -> None:
    """Write `obj` as indented JSON, atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2) + "\n"))


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Save a matplotlib figure as a PNG, atomically, and close it."""
    import matplotlib.pyplot as plt  # here, so that writing JSON never imports matplotlib

    write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    plt.close(fig)
