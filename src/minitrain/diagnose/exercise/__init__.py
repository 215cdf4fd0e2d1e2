"""Notebook 16's exercise: three broken training scripts to diagnose, in this folder (FOLDER); run one with
`minitrain.diagnose.tools.run(FOLDER / "run_a.py", tool)`."""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
SCRIPTS = ("run_a.py", "run_b.py", "run_c.py")
