# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, fetch the default model, run the demo
#   make test   - create .venv, install, fetch fixtures, run ruff, mypy and pytest
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv fixtures demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# A CPU build of torch first (a local wheel where the machine has one), so that the
	# project's `torch>=2.4` never pulls a CUDA build onto a machine without a GPU.
	$(BIN)/python -c "import torch" 2>/dev/null || \
	  $(BIN)/python -m pip install --quiet torch==2.13.0 || \
	  $(BIN)/python -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

fixtures: $(STAMP)
	$(BIN)/python -m structgen._assets

demo: fixtures
	$(BIN)/structgen demo

lint: $(STAMP)
	$(BIN)/ruff check structgen tests benchmarks
	$(BIN)/ruff format --check structgen tests benchmarks
	$(BIN)/mypy

# Two workers on two cores: one torch thread each, or they fight over the cores.
test: fixtures lint
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -n 2 -q tests

bench: fixtures
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/vocab.py
	$(BIN)/python benchmarks/regex.py
	$(BIN)/python benchmarks/grammar.py
	$(BIN)/python benchmarks/maskbench.py --limit 200 --sample --timeout 15

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
