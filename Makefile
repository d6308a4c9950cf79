# Each target bootstraps .venv from requirements.lock when it is missing or stale. Every
# locked file is checked against its hash; the project and its client (both editable, their
# dependencies all in the lock) come after, alone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint bench lock clean

$(STAMP): requirements.lock pyproject.toml starter/client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e . -e ./starter/client
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/moat up

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.execute_latency

# Re-resolve the locks from pyproject.toml, with hashes (needs uv: pip install uv). Versions
# already locked are kept (uv prefers the output file's pins; add --upgrade to move them);
# the runtime lock (the production image) is constrained to the same versions.
lock:
	uv pip compile pyproject.toml --extra dev --python-version 3.11 --no-header \
		--generate-hashes -o requirements.lock
	uv pip compile pyproject.toml --python-version 3.11 --no-header \
		--generate-hashes -c requirements.lock -o requirements-runtime.lock

clean:
	rm -rf $(VENV)
