"""Schemathesis against the running stack's ``/openapi.json``: generated and mutated
requests on every route (admin included), stateful sequences, every check. Passes when no
answer is a 5xx and every answer matches the documented schema, status and headers.

Bounded (``MAX_EXAMPLES`` per operation and phase) to stay around two minutes on 2 cores:
the bodies that hold free-form JSON (inputs, connection configs) are generated from their
recursive schemas, the costliest part.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import BinaryIO

import pytest

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog
from tests.support.stack import ADMIN_KEY, StackFactory

# Offline capabilities only: generated requests must never reach a real host.
OFFLINE = CapabilityCatalog(tuple(c for c in BUILTIN_CAPABILITIES if c.adapter == "echo"))

MAX_EXAMPLES = int(os.environ.get("MOAT_SCHEMATHESIS_EXAMPLES", "30"))
# About two minutes on 2 idle cores; the limit leaves room for a machine shared with others.
TIME_LIMIT_SECONDS = 420

HOOKS = Path(__file__).with_name("schemathesis_hooks.py")

# Every rule the gateway enforces is in its OpenAPI document, but for those no JSON Schema
# can state (``schemathesis_hooks``: positive cases that break one are not sent as valid).
# A schema-valid request may still meet a documented refusal that depends on what is stored,
# not on the request: 404 (no such id), 409 (a conflict with what exists), 410 (a connection
# revoked since: the stateful phase revokes one, then reads it), 413 (over the gateway's
# body limit), 422 (the idempotency key was used with another request), 429 (a quota, which
# the fuzzed admin calls set as low as 0).
CONFIG = """\
hooks = "{hooks}"

[auth.openapi.TenantKey]
bearer = "{tenant_key}"

[auth.openapi.AdminKey]
bearer = "{admin_key}"

[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "410", "413", "422", "429"]
"""


@pytest.mark.slow
@pytest.mark.timeout(TIME_LIMIT_SECONDS + 60)
async def test_schemathesis_finds_nothing(make_stack: StackFactory, tmp_path: Path) -> None:
    async with make_stack(catalog=OFFLINE) as stack:
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.format(hooks=HOOKS, tenant_key=stack.api_key, admin_key=ADMIN_KEY))
        schemathesis = Path(sys.executable).with_name("schemathesis")
        argv = [
            str(schemathesis),
            "--config-file",
            str(config),
            "run",
            f"{stack.url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            str(MAX_EXAMPLES),
            # One worker: CPython 3.11's ast.parse is not thread-safe, and hypothesis calls it
            # while describing strategies ("AST constructor recursion depth mismatch").
            "--workers",
            "1",
            "--seed",
            os.environ.get("MOAT_SCHEMATHESIS_SEED", "20261125"),
            "--generation-database",
            "none",
            "--request-timeout",
            "30",
            "--no-color",
            "--report",
            "junit",
            "--report-junit-path",
            str(tmp_path / "junit.xml"),
        ]
        log = _log(tmp_path / "schemathesis.log")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            await asyncio.wait_for(proc.wait(), TIME_LIMIT_SECONDS)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        finally:
            log.close()
        text = (tmp_path / "schemathesis.log").read_text(errors="replace")
        print(text[-6000:])
        assert proc.returncode == 0, text[-20000:]


def _log(path: Path) -> BinaryIO:
    """Where schemathesis writes as it goes: what it found is kept when it runs out of time."""
    return path.open("wb")
