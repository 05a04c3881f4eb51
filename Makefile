# Two commands: `make demo` and `make test` (`make test-fast`: the unit tests alone). Both build .venv from pyproject.toml first:
# `make demo` the simulator alone (`pip install -e .`), `make test` the dev environment.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The dev environment ([dev] and PyTorch): what the tests, the linter and the benchmarks need.
STAMP := $(VENV)/.installed
# The simulator alone: what the demo needs (a subset of the dev environment, which serves it too).
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo test test-readme test-fast lint bench clean reproduce-check

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# PyTorch for the profiler (tesserae profile) and its tests. Pinned: an unpinned torch pulls a
	# multi-GB CUDA build; 2.13.0 CPU is what this project's CI machine has on disk.
	$(BIN)/python -m pip install -q 'torch==2.13.0' || echo "PyTorch could not be installed: the profiler tests will be skipped"
	touch $(STAMP)

# --no-compile: Python compiles the modules the demo imports when it first runs, not all of SciPy's.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-compile -e .
	touch $(DEMO_STAMP)

# A dev environment already holds everything the demo needs.
demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/tesserae compare --run "fifo(no-backfill)" --run fifo --run srtf --run tiresias-las:tiresias \
		--run las:tesserae+packing \
		--jobs 400 --load 1.5 --cluster 16x4 --seed 1 --out out/demo

# -rs: every skipped test is listed with its reason at the end.
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -n 2 --dist loadgroup -rs -m "not readme_long" tests

# The README blocks that replay a whole production trace (Philly: about 10 min of CPU together);
# kept out of `make test` so that it stays well under 15 minutes on 2 cores; CI runs both.
test-readme: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -rs -m readme_long tests/test_readme_blocks.py

# The inner loop: unit tests only (no server, Ray or browser; not the slow ones), a couple of minutes.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "unit and not slow" tests

# The fidelity and placement reports' figures, regenerated from committed inputs (issue 29): each
# script runs our side of every recorded case again and fails on any difference in a figure that
# is not a timing, or in the page it renders. Not part of `make test`: about two hours on two cores
# (1 h 55 min on an Intel Xeon on 2026-12-02; the placement study's 435 simulations are most of it). GAVEL_TRACES: the Gavel traces that
# docs/reproduction/gavel.md lists (written by Gavel's own generator; committed as data, with their
# commands and SHA-256, in benchmarks/inputs/gavel/).
GAVEL_TRACES ?= benchmarks/inputs/gavel
reproduce-check: $(STAMP)
	$(BIN)/python benchmarks/tiresias_fidelity.py check
	$(BIN)/python benchmarks/gavel_fidelity.py --check --traces $(GAVEL_TRACES)
	$(BIN)/python benchmarks/reproduce_tesserae.py --check

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

clean:
	rm -rf $(VENV) out .pytest_cache
