"""What needs a person, as gauges: after a real execution ends ``outcome_unknown`` (and so
dead-letters) and another waits for an approval, the tenant's counts say so, and the
gauges serve them on the metrics endpoint."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from starter.devstack import free_port
from starter.devstack.providers import FakeSlack
from starter.runtime.observability import temporal_runtime
from starter.runtime.operator_gauges import OperatorGauges, read_every_tenant
from store import operations, tenancy
from tests.gateway.test_approvals import pending, setup
from tests.support.fakes import FakeProvider
from tests.support.stack import Stack, StackFactory
from tests.workflows.test_reconcile import CATALOG


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, slack: FakeSlack, provider: FakeProvider
) -> AsyncIterator[Stack]:
    allow = [slack.allow_entry, provider.allow_entry]
    async with make_stack(catalog=CATALOG, http_allow_hosts=allow) as s:
        yield s


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample line of a Prometheus scrape, without the
    label the SDK's exporter adds to every sample (``service_name``)."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            name = re.sub(r'service_name="[^"]*",?', "", name).replace(",}", "}")
            found[name.removesuffix("{}")] = float(value)
    return found


async def outcome_unknown(stack: Stack, slack: FakeSlack) -> str:
    """An execution whose answer was lost and could not be looked up: ends outcome_unknown,
    dead-lettered."""
    slack.scopes["xoxb-noread"] = {"chat:write"}
    con = await stack.add_connection("slack", "xoxb-noread", config={"base_url": slack.base_url})
    slack.fail_next(1)
    channel = "C" + uuid.uuid4().hex[:10].upper()
    r = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "?"}, connection_id=con
    )
    assert r.json()["error"]["code"] == "outcome_unknown", r.text
    return str(r.json()["receipt_id"])


async def test_counts_and_gauges_after_real_events(
    stack: Stack,
    slack: FakeSlack,
    provider: FakeProvider,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    await outcome_unknown(stack, slack)
    url = await setup(stack, provider, "/ops-approval")
    await pending(stack, url, "ops-approval")
    now = datetime.now(UTC)
    # As the worker reads them: the application role, row-level security in force.
    async with tenancy.tenant_transaction(app_sessions, stack.tenant_id) as session:
        counts = await operations.needs_a_person(session, stack.tenant_id, now)
    assert counts.dead_letters["execution"].count == 1
    assert counts.outcome_unknown == {"1h": 1, "24h": 1}
    assert counts.approvals_pending == 1 and counts.approvals_overdue == 0
    assert counts.approvals_oldest is not None and counts.approvals_oldest <= now
    assert counts.connections_needs_reauth == 0 and counts.probes_failing == 0

    address = f"127.0.0.1:{free_port()}"
    runtime = temporal_runtime(address)
    assert runtime is not None
    OperatorGauges(runtime.metric_meter).publish(counts, now)
    async with httpx.AsyncClient() as http:
        scraped = samples((await http.get(f"http://{address}/metrics")).text)
    assert scraped['moat_dead_letters_open{kind="execution"}'] == 1
    assert scraped['moat_dead_letters_open{kind="delivery"}'] == 0
    assert scraped['moat_dead_letters_oldest_age_seconds{kind="execution"}'] > 0
    assert scraped['moat_executions_outcome_unknown{window="1h"}'] == 1
    assert scraped["moat_approvals_pending"] == 1
    assert scraped["moat_approvals_pending_oldest_age_seconds"] >= 0
    assert scraped["moat_outbox_lag_seconds"] == 0  # no webhook subscribed, nothing waits

    # Every tenant summed, as a worker publishes them: at least this tenant's.
    total = await read_every_tenant(app_sessions)
    assert total.dead_letters["execution"].count >= 1
    assert total.approvals_pending >= 1 and total.outcome_unknown["1h"] >= 1
