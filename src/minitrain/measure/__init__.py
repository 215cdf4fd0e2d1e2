"""The deeper measurements, beyond the lab sheet: one module each, found by `registry()`.

Each measurement module defines `MEASUREMENT` (see `measurement.py`): adding one is a module, a
notebook and a test; the lab's runner and report find them through their notebooks and JSON files.
The modules without one are parts they share (allreduce, scoring, sockets, trace) or one
measurement's side (NAME_ranks: what its ranks run under torchrun; NAME_reading: the tables and sentences
its notebook reads; scaling_runs, resumes, restart_figure).
"""

import importlib
import pkgutil

from minitrain.measure.measurement import Measurement


def registry() -> dict[str, Measurement]:
    """Every measurement module's MEASUREMENT, by name."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "MEASUREMENT", None), Measurement):
            found[module.MEASUREMENT.name] = module.MEASUREMENT
    return found
