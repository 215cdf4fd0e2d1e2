"""Notebook 16's exercise: three broken training scripts to diagnose (run them with minitrain.diagnose.tools.run)."""
