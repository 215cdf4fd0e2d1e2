"""Writing the lab's results so that no reader ever sees half a file, and reading them back as typed records."""

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import fields
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


def read_json_object(path: Path, error: type[ValueError], shown: str, missing_fix: str, bad_fix: str) -> dict:
    """The JSON object in `path`, or `error` naming the file (as `shown`), what is wrong and the fix."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{shown} is missing; {missing_fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{shown} is not valid JSON ({e}); {bad_fix}") from e
    if not isinstance(data, dict):
        raise error(f"{shown} does not hold a JSON object; {bad_fix}")
    return data


def field_problems(record_type: type, data: dict, optional: tuple[str, ...] = ()) -> str:
    """'lacks a, b; has unknown fields c' for a dataclass's fields against `data`'s keys ('' when they match)."""
    names = [f.name for f in fields(record_type)]
    missing = [n for n in names if n not in data and n not in optional]
    unknown = sorted(data.keys() - set(names))
    return "; ".join(f"{label} {', '.join(keys)}" for label, keys in
                     (("lacks", missing), ("has unknown fields", unknown)) if keys)

