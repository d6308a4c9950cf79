# Each target bootstraps .venv from requirements.lock when it is missing or stale.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint bench lock clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
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

# Re-resolve requirements.lock from pyproject.toml (needs uv: pip install uv).
lock:
	uv pip compile pyproject.toml --extra dev --python-version 3.11 --no-header -o requirements.lock

clean:
	rm -rf $(VENV)
