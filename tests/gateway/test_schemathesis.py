"""Schemathesis against the running stack's ``/openapi.json``: generated and mutated
requests on every route (admin included), stateful sequences, every check. Passes when no
answer is a 5xx and every answer matches the documented schema, status and headers.

Bounded (``MAX_EXAMPLES`` per operation and phase) to stay around a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog
from tests.support.stack import ADMIN_KEY, StackFactory

# Offline capabilities only: generated requests must never reach a real host.
OFFLINE = CapabilityCatalog(tuple(c for c in BUILTIN_CAPABILITIES if c.adapter == "echo"))

MAX_EXAMPLES = int(os.environ.get("MOAT_SCHEMATHESIS_EXAMPLES", "60"))
TIME_LIMIT_SECONDS = 240

CONFIG = """\
[auth.openapi.TenantKey]
bearer = "{tenant_key}"

[auth.openapi.AdminKey]
bearer = "{admin_key}"

[checks.positive_data_acceptance]
# Schema-valid requests may still be refused for what a schema cannot say: an idempotency
# key used with another request (422), a body over the limit (413).
expected-statuses = ["2xx", "401", "403", "404", "409", "413", "422"]

[[operations]]
# Also 400: an Idempotency-Key header that differs from the idempotency_key field, an
# input that does not match its capability's own input schema.
include-operation-id = "execute"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "413", "422", "429"
]

[[operations]]
# Also 400: a cursor string that this API did not hand out.
include-operation-id = "list_receipts"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401"]

[[operations]]
include-operation-id = "list_webhooks"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_deliveries"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_dead_letters"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_probes"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_connections"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "admin_list_connections"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_keys"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_approvals"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_versions"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
include-operation-id = "list_tenants"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404"]

[[operations]]
# Also 400: a URL no delivery could reach (not http(s), or a non-public address). Every
# create may meet its quota (429), which the fuzzed admin calls set as low as 0.
include-operation-id = "add_webhook"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "429"]

[[operations]]
# Also 400: an execution's requeue without the operator's statement.
include-operation-id = "requeue_dead_letter"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409"]

[[operations]]
# Also 400: a string that is not a host[:port] allow-list entry (a port over 65535, a URL,
# a wildcard), which the schema's plain string items cannot say.
include-operation-id = "update_tenant"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404"]

[[operations]]
# Also 400: a connection's config holding text Postgres cannot store (NUL, a lone
# surrogate), nested too deep or too large, or looking like it holds a secret; or naming
# no origin its secret may be sent to (base_url, allowed_origins), or a malformed one.
include-operation-id = "create_connection"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "429"]

[[operations]]
include-operation-id = "admin_create_connection"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "429"]

[[operations]]
# Also 400: a rule with a budget whose capability is a pattern (a budget names one
# capability), which the schema cannot say.
include-operation-id = "put_policy"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "429"]

[[operations]]
include-operation-id = "put_tenant_policy"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "429"]

[[operations]]
# Also 400: a decision's comment holding text Postgres cannot store (NUL, a lone surrogate).
include-operation-id = "approve"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "409", "413", "422"
]

[[operations]]
include-operation-id = "reject"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "409", "413", "422"
]

[[operations]]
# Also 400: a capability or input the catalog does not declare safe to probe, an input that
# does not match its capability's schema, or an interval under the configured minimum.
include-operation-id = "add_probe"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "429"]
"""


@pytest.mark.slow
@pytest.mark.timeout(TIME_LIMIT_SECONDS + 60)
async def test_schemathesis_finds_nothing(make_stack: StackFactory, tmp_path: Path) -> None:
    async with make_stack(catalog=OFFLINE) as stack:
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.format(tenant_key=stack.api_key, admin_key=ADMIN_KEY))
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
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), TIME_LIMIT_SECONDS)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        text = output.decode(errors="replace")
        print(text[-6000:])
        assert proc.returncode == 0, text[-20000:]
