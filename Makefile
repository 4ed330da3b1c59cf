# The lab's commands. Each creates .venv from requirements.txt when it is missing or stale.
#   make lab        open JupyterLab on notebooks/
#   make test       unit tests, crash suite and strict nbval over every notebook
#   make notebooks  re-execute every notebook in place (commit the result)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test unit nbval notebooks bench clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest

unit: $(STAMP)
	$(BIN)/python -m pytest tests

nbval: $(STAMP)
	$(BIN)/python -m pytest notebooks

notebooks: $(STAMP)
	$(BIN)/python scripts/run_notebooks.py

bench: $(STAMP)
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) build *.egg-info
