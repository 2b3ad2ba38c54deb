# Every target creates the environment first, so `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/afc submit examples/manifest.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check afc_cli tests bench
	$(BIN)/ruff format --check afc_cli tests bench

bench: $(STAMP)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/s3_upload.py

clean:
	rm -rf $(VENV) afc.db afc.db-wal afc.db-shm afc.db-spool afc-outputs
