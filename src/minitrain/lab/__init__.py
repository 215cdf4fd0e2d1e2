"""The lab around the core, one subpackage per concern: running (`make lab`), reporting (the run folders, the
manifest, the report, the checker), notebooks (the cells' helpers), editions (the student edition), teaching (the
teacher's modules), grading (`make grade`). Beside them, the entry points' shims (`python -m minitrain.lab.check`)."""
