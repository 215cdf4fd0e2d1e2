# Two commands for a new machine: `make lab` runs the whole lab, `make test` runs every test.
# Both create .venv on first use, install torch==2.13.0 (CPU build) first, then this project.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0

.PHONY: venv lab test notebook demo corpus clean-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing $(TORCH) (CPU build) first, then minitrain[dev] ..."
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

lab: $(STAMP)
	$(PY) -m minitrain.train --steps 300

demo: $(STAMP)
	$(PY) -m minitrain.train --steps 300

test: $(STAMP)
	$(PY) -m pytest

corpus: $(STAMP)
	$(PY) -m minitrain.corpus

clean-venv:
	rm -rf $(VENV)
