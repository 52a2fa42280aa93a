# make demo: install and run the reference workload.
# Test tiers: make test (the fast suite, every area; the frameworks' tests are theirs), make
# test-slow (the slow end-to-end tests and the real workloads: the full MNIST epoch), make
# test-frameworks (installs TensorBoard, Lightning, transformers, gymnasium, safetensors,
# never dependencies of repro-check, and runs the tests marked frameworks: what they log, resuming
# from their checkpoints, the environment calls diagnose names), make test-all (all three).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo lint test test-slow test-frameworks test-all wheel-check bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# the package's, the tests' and the scripts' bytecode, written before a suite or a bench: where
# PYTHONDONTWRITEBYTECODE is set (CI machines often do), every process a test starts would
# otherwise compile this package again (0.8 s of each check measured); only changed files are
# compiled again
COMPILE := $(BIN)/python -m compileall -q -j 0 repro_check tests scripts

demo: $(STAMP)
	$(COMPILE)
	$(BIN)/repro-check repro_check.workloads.mnist:main --seed 123

# ruff (pyflakes, pycodestyle errors, bugbear's bug patterns) and mypy, both configured in pyproject.toml
lint: $(STAMP)
	$(BIN)/ruff check repro_check tests scripts
	$(BIN)/mypy

# --durations: the slowest tests are printed, so the next slow one is seen when it lands
PYTEST := $(BIN)/python -m pytest -q --durations=15

# the fast suite in a worker per CPU (pytest-xdist), a test file each at a time: about a quarter
# of one worker's time is a single run going or a test in this process, which leaves a core idle
test: $(STAMP)
	$(COMPILE)
	$(PYTEST) -n auto --dist loadfile -m "not slow and not frameworks"

test-slow: $(STAMP)
	$(COMPILE)
	$(PYTEST) -m "slow and not frameworks"

test-frameworks: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pip install --quiet -c constraints.txt tensorboard pytorch-lightning transformers accelerate gymnasium safetensors \
		pandas pyarrow scipy scikit-learn h5py numba polars wandb
	$(PYTEST) -m frameworks

test-all: test test-slow test-frameworks

# the wheel installed into a fresh venv outside the checkout, then the demo and doctor from there
wheel-check:
	PYTHON=$(PYTHON) scripts/wheel_check.sh

bench: $(STAMP)
	$(COMPILE)
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) .repro-check .pytest_cache
