"""Which sitting (one boot of one machine) each result comes from, and a note when compared results differ.

Two sittings of the same kind of virtual machine can differ by more than any effect the notebooks
show: numbers compare within one sitting.
"""

import json
from pathlib import Path

from minitrain.lab.reporting.results_file import holds_results, typed_results
from minitrain.paths import EXPERIMENT_DIR, relative

BEFORE_SITTINGS = "unrecorded"  # a result written before provenance named its sitting


def sitting_of(result: dict) -> str:
    """The sitting of a result: a deeper measurement's typed `provenance` (read_results_file), or run.json /
    the manifest's own field."""
    found = result["provenance"].sitting if "provenance" in result else result.get("sitting")
    return found or BEFORE_SITTINGS


def sitting_note(*results: dict) -> str:
    """"" when every result comes from one recorded sitting, else a sentence naming the sittings."""
    sittings = list(dict.fromkeys(sitting_of(r) for r in results))
    if len(sittings) == 1 and sittings[0] != BEFORE_SITTINGS:
        return ""
    return (f"These numbers come from {len(sittings)} sittings ({'; '.join(sittings)}): a difference between "
            f"them may be the machine's, not the effect's." if len(sittings) > 1 else
            "These numbers come from results that do not record their sitting: compare them with care.")


def committed_sittings(folder: Path = EXPERIMENT_DIR) -> dict[str, tuple[str, str]]:
    """Every result under the experiment folder (run.json files, the manifest, the deeper results):
    its sitting and date, by path."""
    found = {}
    for path in sorted(folder.rglob("*.json")):
        result = json.loads(path.read_text())
        if holds_results(result):
            result = typed_results(result, relative(path))
            found[relative(path)] = (sitting_of(result), result["provenance"].date)
        elif isinstance(result, dict) and "date" in result:
            found[relative(path)] = (sitting_of(result), result["date"])
    return found
