# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install, fetch the default model, run the demo
#   make test   - create .venv, install, fetch fixtures, run ruff, mypy and pytest
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv native fixtures demo test lint bench clean test-engines test-free-threaded

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

# The C extensions and the mypyc-compiled schema front end, rebuilt in place: after an edit of
# structgen/schema/_*.py the pure-Python modules run until this does (structgen/_compiled.py).
# Quick when nothing changed (mypyc rewrites no C file it would write the same).
native: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

# Tokenizers and the default model (structgen/_assets.py), and the ajv oracle the tests check
# against (tests/oracles/: `npm ci` of the committed lock into $STRUCTGEN_CACHE).
fixtures: $(STAMP)
	$(BIN)/python -m structgen._assets
	$(BIN)/python -m tests.oracles.ajv --check

demo: fixtures
	$(BIN)/structgen demo

lint: $(STAMP)
	$(BIN)/ruff check structgen tests benchmarks
	$(BIN)/ruff format --check structgen tests benchmarks
	$(BIN)/mypy

# Two workers on two cores: one torch thread each, or they fight over the cores.
test: fixtures native lint
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -n 2 -q tests

# The serving-engine plugins inside SGLang's and vLLM's real grammar managers, on the CPU
# (a separate environment: the engines pin their own transformers).
ENGINES       := .venv-engines
ENGINES_STAMP := $(ENGINES)/.installed

$(ENGINES_STAMP): pyproject.toml requirements/engines.txt requirements/engines-nodeps.txt requirements/engines-constraints.txt
	test -x $(ENGINES)/bin/python || $(PYTHON) -m venv $(ENGINES)
	$(ENGINES)/bin/python -m pip install --quiet --upgrade pip
	$(ENGINES)/bin/python -c "import torch" 2>/dev/null || \
	  $(ENGINES)/bin/python -m pip install --quiet torch==2.13.0 || \
	  $(ENGINES)/bin/python -m pip install --quiet torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
	$(ENGINES)/bin/python -m pip install --quiet -c requirements/engines-constraints.txt \
	  -e '.[test]' -r requirements/engines.txt
	$(ENGINES)/bin/python -m pip install --quiet --no-deps -r requirements/engines-nodeps.txt
	touch $(ENGINES_STAMP)

test-engines: fixtures $(ENGINES_STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(ENGINES)/bin/python -m pytest -q -p no:cacheprovider \
	  tests/engines tests/integrations/test_engine_plugins.py

# structgen on a free-threaded CPython 3.14t (no GIL), built once from Debian's source of it
# (scripts/free-threaded-python.sh, ~5 minutes): the C extensions rebuilt for it in place, a
# check that importing structgen leaves the GIL off, then the tests that need no torch (there
# is no CPU build of torch for 3.14t here: the bitmask and reasoning-model files are left out).
# Not part of `make test`. The three word-boundary tests left out compare `\B` with the
# running `re`, which matches the empty text from 3.14 on.
FT       := .venv-ft
FT_STAMP := $(FT)/.installed
FT_WHEELS := numpy,pydantic-core,rpds-py,tokenizers,safetensors,regex,pyyaml,markupsafe,hf-xet

$(FT_STAMP): requirements/free-threaded.txt
	test -x $(FT)/bin/python || "$$(scripts/free-threaded-python.sh .python-ft)" -m venv $(FT)
	$(FT)/bin/python -m pip install --quiet --only-binary $(FT_WHEELS) -r requirements/free-threaded.txt
	touch $(FT_STAMP)

test-free-threaded: fixtures $(FT_STAMP)
	$(FT)/bin/python setup.py -q build_ext --inplace
	PYTHONPATH=. $(FT)/bin/python -c "import sys, structgen; \
	  assert not sys._is_gil_enabled(), 'importing structgen turned the GIL on'"
	PYTHONPATH=. OMP_NUM_THREADS=1 $(FT)/bin/python -m pytest -n 2 -q -p no:cacheprovider \
	  tests/automata tests/schema tests/masks tests/vocab tests/grammar \
	  tests/reliability/test_threads.py tests/reliability/test_collector.py tests/reliability/test_crew.py \
	  tests/reliability/test_compile_cache.py \
	  --ignore=tests/grammar/test_reasoning.py --ignore=tests/masks/test_bitmask.py \
	  --deselect "tests/automata/test_word_boundaries.py::TestAgainstTheEngines::test_python" \
	  --deselect "tests/automata/test_word_boundaries.py::TestAgainstTheEngines::test_full_match"

bench: fixtures
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/vocab.py
	$(BIN)/python benchmarks/regexes.py
	$(BIN)/python benchmarks/grammar.py
	$(BIN)/python benchmarks/maskbench.py --limit 200 --sample --timeout 15
	$(BIN)/python benchmarks/compile_cache.py --limit 200

clean:
	rm -rf $(VENV) $(ENGINES) $(FT) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
