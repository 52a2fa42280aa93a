# make demo: install and run the reference workload; make test: install and run the tests;
# make test-frameworks: install TensorBoard, Lightning and transformers (never dependencies of
# repro-check) and run the tests of the metrics they log.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-frameworks bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/repro-check repro_check.workloads.mnist:main --seed 123

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-frameworks: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt tensorboard pytorch-lightning transformers accelerate
	$(BIN)/python -m pytest -q tests/child/test_frameworks.py

bench: $(STAMP)
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) .repro-check .pytest_cache
