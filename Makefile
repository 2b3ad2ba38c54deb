# Every target creates the environment first, so `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-http bench-postgres chaos chaos-postgres soak clean bytecode

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,web]'
	touch $(STAMP)

# afc's own modules compiled to bytecode up front: an editable install leaves that to the first
# import, which writes nothing when PYTHONDONTWRITEBYTECODE is set (as on this project's
# machines), and then every `afc` process compiles them again: ~0.15 s of each command's
# start-up, in a test suite that runs `afc` in child processes throughout. Only changed files
# are compiled again.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q afc_cli

run: bytecode
	$(BIN)/afc submit examples/manifest.yaml

test: bytecode
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check afc_cli tests bench
	$(BIN)/ruff format --check afc_cli tests bench

bench: bytecode
	$(BIN)/python bench/run.py
	$(BIN)/python bench/s3_upload.py

# HTTP at width against a fake provider server in its own process, and a 100,000-job list's
# admission (several minutes: apart from `make bench`)
bench-http: bytecode
	$(BIN)/python bench/http_calls.py
	$(BIN)/python bench/admission.py

# 10,000 instant jobs through one PostgreSQL ledger with 1 and 3 workers, and the cost of a
# claim (a server is started for it, as the tests do)
bench-postgres: bytecode
	$(BIN)/python bench/postgres_workers.py

# afc killed at random over rounds of a few hundred jobs on the four fake providers, then
# reconciled from outside (every billed request, every stored object, every figure)
chaos: bytecode
	$(BIN)/python bench/chaos.py

# the same on one PostgreSQL ledger, three worker hosts killed, stalled past their lease,
# drained; cancels, retries and re-submits beside them
chaos-postgres: bytecode
	$(BIN)/python bench/chaos.py --postgres --jobs 400

# one overnight-shaped batch over HTTP (2,000 jobs; --jobs 10000 for the night's size), the
# fake providers holding each render 0.2-2 s: a submit stopped by SIGTERM, a resume by SIGKILL,
# a last resume; then reconciled as chaos does, and the read commands timed on the ledger
soak: bytecode
	$(BIN)/python bench/soak.py

clean:
	rm -rf $(VENV) afc.db afc.db-wal afc.db-shm afc.db-spool afc-outputs
