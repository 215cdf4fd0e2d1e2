# Two commands for a new machine: `make lab` runs the whole lab, `make test` runs every test.
# Both create .venv on first use, install torch==2.13.0 (CPU build) first, then this project.
# tools/install_torch_cpu.py picks the CPU build: PyTorch's CPU index on Linux, PyPI on macOS and
# Windows, a local CPU wheel as fallback; it refuses anything that would bring nvidia-* packages.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0

.PHONY: venv lab test notebook bench demo corpus measurements clean-venv

$(STAMP): pyproject.toml tools/install_torch_cpu.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing $(TORCH) (CPU build) first, then minitrain[dev] ..."
	$(PY) tools/install_torch_cpu.py $(TORCH)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# The whole lab with papermill: run.ipynb for 1 and 2 processes, the repeats, notebooks 02-06 and 01,
# then the checker's table (with the DDP tests). Artifacts: build/35-ddp-cpu/ in the reference edition
# (the committed ones stay as they are: `make measurements` rewrites them), experiments/35-ddp-cpu/ in
# the student edition. ARGS: python -m minitrain.lab's options, e.g. `make lab ARGS=--busy-ok` on a busy machine.
ARGS ?=
lab: $(STAMP)
	$(PY) -m minitrain.lab $(ARGS)

# JupyterLab from the venv, on the entry notebook (kernel "python3" = this venv's Python); its kernels
# talk over Unix sockets in Jupyter's private runtime folder, not TCP ports (docs/security.md).
notebook: $(STAMP)
	$(VENV)/bin/jupyter lab --KernelManager.transport=ipc notebooks/01-ddp-cpu.ipynb

# Performance figures, each a ratio measured side by side in one run; prints, never fails on speed.
bench: $(STAMP)
	$(PY) -m minitrain.measure.bench

# Every committed measurement again, in one sitting: the deeper measurements, then the lab and notebooks
# 01-16, in a row on an idle machine (about 25 minutes on 2 logical CPUs). Rewrites experiments/ and notebooks/.
measurements: $(STAMP)
	$(PY) -m minitrain.measure.sitting

demo: $(STAMP)
	$(PY) -m minitrain.train --steps 300

# The library tests and the notebooks (strict nbval), three at a time (pytest-xdist: a file's tests and a
# notebook's cells stay together; the longest files first, by docs/test-budget.md's seconds: tests/conftest.py): on two
# cores a third worker runs while the others wait on a timeout or a process; notebook runs go to a temporary folder.
test: $(STAMP)
	$(PY) -m pytest -n 3 --dist loadfile --no-loadscope-reorder --nbval --nbval-current-env --nbval-cell-timeout=600 tests notebooks

corpus: $(STAMP)
	$(PY) -m minitrain.corpus

# The student edition in build/student/: the whole repository with every solution region replaced by
# `# YOUR CODE HERE (<what>)` / `raise NotDone("<what>")` (minitrain.todo), notebook outputs
# cleared, without the reference run's artifacts, the teacher's kit and solutions/ (TEACHER.md).
.PHONY: student grade
student: $(STAMP)
	$(PY) -m minitrain.lab.student --out build/student

# Every TODO of the lab with its points: PASS / FAIL (the mistake named) / not done / hangs / blocked, each graded
# in a process of its own with a timeout by the real tests. A class: `$(PY) -m minitrain.lab.grade --class FOLDER`.
grade: $(STAMP)
	$(PY) -m minitrain.lab.grade

clean-venv:
	rm -rf $(VENV)
