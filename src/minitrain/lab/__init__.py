"""The lab around the core: the run-folder contract, the report and manifest, the checker, the
one-command experiment, the notebook runner and the notebooks' helpers."""
