"""The lab around the core, one subpackage per concern: todos (every TODO declared once, and the one protocol for a
blank one), running (`make lab`), reporting (the run folders, the manifest, the report, the stop conditions), notebooks
(the cells' helpers), editions (the student edition), teaching (the teacher's modules), grading (`make grade`).
Beside them, the entry points' shims under their old names (`python -m minitrain.lab.check` runs
reporting.stop_conditions); docs/layout.md defines the lab's words (sitting, beyond, wrap demo, your code)."""
