"""Notebook 16: broken distributed runs, and the tools that name what broke (which rank, which collective,
which line, why): `faults` is the broken training run, `tools` runs it under one tool and reads the answer."""
