# Two commands: `make demo` and `make test`. Both build .venv from pyproject.toml first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# PyTorch for the profiler (tesserae profile) and its tests. Pinned: an unpinned torch pulls a
	# multi-GB CUDA build; 2.13.0 CPU is what this project's CI machine has on disk.
	$(BIN)/python -m pip install -q 'torch==2.13.0' || echo "PyTorch could not be installed: the profiler tests will be skipped"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tesserae compare --run "fifo(no-backfill)" --run fifo --run srtf --run tiresias-las:tiresias \
		--run las:tesserae+packing \
		--jobs 400 --load 1.5 --cluster 16x4 --seed 1 --out out/demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -n 2 --dist loadgroup tests

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

clean:
	rm -rf $(VENV) out .pytest_cache
