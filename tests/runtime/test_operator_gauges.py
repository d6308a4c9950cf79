"""What needs a person, as gauges: after a real execution ends ``outcome_unknown`` (and so
dead-letters) and another waits for an approval, the tenant's counts say so, and the
gauges serve them on the metrics endpoint."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest_asyncio
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.ids import uuid7
from schemas.names import PROBE_SCHEDULE_PREFIX
from schemas.records import ExecutionStatus, Receipt
from starter.devstack import free_port
from starter.devstack.providers import FakeSlack
from starter.runtime.observability import temporal_runtime
from starter.runtime.operator_gauges import OperatorGauges, read_every_tenant
from store import operations, probes, receipts, tenancy
from store.models import ConnectionRow
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
    # A connection the provider refused for good (store.connection_tokens marks it).
    con = await stack.add_connection("slack", "xoxb-gone", config={"base_url": slack.base_url})
    async with tenancy.tenant_transaction(app_sessions, stack.tenant_id) as session:
        await session.execute(
            update(ConnectionRow)
            .where(ConnectionRow.id == con)
            .values(needs_reauth_at=now, needs_reauth_reason="invalid_grant")
        )
        counts = await operations.needs_a_person(session, stack.tenant_id, now)
    assert counts.connections_needs_reauth == 1

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
    assert scraped["moat_connections_needs_reauth"] == 1
    assert scraped["moat_outbox_lag_seconds"] == 0  # no webhook subscribed, nothing waits

    # Every tenant summed, as a worker publishes them: at least this tenant's.
    total = await read_every_tenant(app_sessions)
    assert total.dead_letters["execution"].count >= 1
    assert total.approvals_pending >= 1 and total.outcome_unknown["1h"] >= 1


def probe_run(tenant_id: str, probe_id: str, status: ExecutionStatus, at: datetime) -> Receipt:
    """A probe's run as the record step writes it (its schedule's key, marked synthetic)."""
    key = f"probe:{PROBE_SCHEDULE_PREFIX}{probe_id}-run-{at:%Y-%m-%dT%H:%M:%SZ}"
    return Receipt(
        id=str(uuid7()),
        capability_id="demo.echo",
        capability_version="1.0.0",
        adapter_id="echo",
        tenant_id=tenant_id,
        connection_id="",
        request_id=str(uuid7()),
        timestamp=at,
        latency_ms=5,
        idempotency_key=key,
        input_hash="sha256:x",
        status=status,
        policy_decision_id="p",
        is_synthetic=True,
        workflow_id=f"exec/{tenant_id}/{uuid.uuid4().hex}",
        run_id=str(uuid.uuid4()),
        trace_id=uuid.uuid4().hex,
    )


async def test_a_probe_is_failing_while_its_latest_run_failed(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    tid, now = stack.tenant_id, datetime.now(UTC)
    async with tenancy.tenant_transaction(app_sessions, tid) as session:
        made = [
            await probes.insert_probe(
                session, tid, "demo.echo", None, {}, None, 60, api_key_id="k", scopes=[]
            )
            for _ in range(2)
        ]
        ok, failing = (row.id for row in made)
        for probe_id, runs in ((ok, ["failure", "success"]), (failing, ["success", "failure"])):
            for ago, status in zip((60, 1), runs, strict=True):
                at = now - timedelta(seconds=ago)
                await receipts.insert_receipt(
                    session, probe_run(tid, probe_id, ExecutionStatus(status), at)
                )
    async with tenancy.tenant_transaction(app_sessions, tid) as session:
        counts = await operations.needs_a_person(session, tid, now)
    assert counts.probes_failing == 1
