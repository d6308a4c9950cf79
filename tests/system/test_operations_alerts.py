"""Operations alerts through Moat itself: an ``outcome_unknown``, a dead letter and a
connection needing re-auth each reach the operators' Slack channel (the Slack fake) or
webhook endpoint (the Standard Webhooks receiver) once, as an execution whose idempotency
key is the event's, with the command that handles it. A repeated hand-off and a second
announcing run send nothing more."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.alerts import Alerter
from schemas.alerts import AlertInput, AlertKind, alert_key, alert_workflow_id
from schemas.names import ANNOUNCE_ALERT_WORKFLOW
from schemas.run import workflow_id_for
from schemas.slack_approvals import AnnounceResult
from schemas.webhooks import DeadLetterStatus, execution_dead_letter_id
from starter.devstack.providers import FakeSlack, FakeWebhookReceiver
from starter.runtime.outbox_relay import OutboxRelay
from store import dead_letters, tenancy
from tests.runtime.test_operator_gauges import outcome_unknown
from tests.support.stack import Stack, StackFactory
from tests.system.test_webhooks import subscribe
from tests.workflows.test_reconcile import CATALOG

OPS_CHANNEL = "COPS" + uuid.uuid4().hex[:6].upper()


@pytest.fixture(scope="module")
def receiver() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, slack: FakeSlack, receiver: FakeWebhookReceiver
) -> AsyncIterator[Stack]:
    allow = [slack.allow_entry, receiver.allow_entry]
    # The route is completed once the operators' tenant and connection exist (below).
    async with make_stack(
        catalog=CATALOG, http_allow_hosts=allow, alerts_tenant="set-below", alerts_target="-"
    ) as s:
        yield s


def route(stack: Stack, connection_id: str, target: str) -> None:
    stack.settings.alerts_tenant = stack.tenant_id
    stack.settings.alerts_connection_id = connection_id
    stack.settings.alerts_target = target
    stack.settings.alerts_console_url = "https://moat.example.test"


async def announced(stack: Stack, kind: AlertKind, event_id: str) -> AnnounceResult:
    handle = stack.client.get_workflow_handle(
        alert_workflow_id(kind, event_id), result_type=AnnounceResult
    )
    return await handle.result()


async def again(stack: Stack, tenant_id: str, kind: AlertKind, event_id: str) -> None:
    """A retried step's hand-off, then a second announcing run of the same event."""
    await Alerter(stack.client, stack.settings.deliveries_task_queue, True).hand_off(
        tenant_id, kind, event_id
    )
    result = await stack.client.execute_workflow(
        ANNOUNCE_ALERT_WORKFLOW,
        AlertInput(tenant_id=tenant_id, kind=kind, event_id=event_id),
        id=f"again-{uuid.uuid4().hex}",
        task_queue=stack.settings.deliveries_task_queue,
        result_type=AnnounceResult,
    )
    assert result.status == "success", result


async def test_outcome_unknown_alerts_slack_once(stack: Stack, slack: FakeSlack) -> None:
    ops = await stack.add_connection("slack", "xoxb-ops", config={"base_url": slack.base_url})
    route(stack, ops, OPS_CHANNEL)
    receipt_id = await outcome_unknown(stack, slack)
    result = await announced(stack, AlertKind.OUTCOME_UNKNOWN, receipt_id)
    assert result.status == "success", result
    [message] = slack.posted(OPS_CHANNEL)
    assert f"moat runs show {receipt_id}" in message["text"]
    assert f"https://moat.example.test/console/executions/{receipt_id}" in message["text"]
    assert stack.tenant_id in message["text"] and "outcome_unknown" in message["text"]
    # The execution carries the event's key; its own failure would never be alerted.
    key = alert_key(AlertKind.OUTCOME_UNKNOWN, receipt_id)
    run = stack.client.get_workflow_handle(workflow_id_for(stack.tenant_id, key))
    assert (await run.describe()).status is not None

    await again(stack, stack.tenant_id, AlertKind.OUTCOME_UNKNOWN, receipt_id)
    assert len(slack.posted(OPS_CHANNEL)) == 1


async def test_dead_letter_and_reauth_alert_the_webhook_once(
    stack: Stack, receiver: FakeWebhookReceiver
) -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    ops = await stack.add_connection("webhook", secret, config={"base_url": receiver.base_url})
    route(stack, ops, f"{receiver.base_url}/ops-alerts")
    alerter = Alerter(stack.client, stack.settings.deliveries_task_queue, True)
    # A dead letter as the record step writes one, then its hand-off as that step makes it.
    receipt_id = str(uuid.uuid4())
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        await dead_letters.record_execution(
            session,
            tenant_id=stack.tenant_id,
            receipt_id=receipt_id,
            reason="the effect's retries ran out",
            error_code="provider_unavailable",
            attempted={"capability_id": "http.request"},
        )
    dl_id = execution_dead_letter_id(receipt_id)
    await alerter.hand_off(stack.tenant_id, AlertKind.DEAD_LETTER, dl_id)
    # A connection needing re-auth, as the OAuth refresh announces one.
    await alerter.hand_off(stack.tenant_id, AlertKind.CONNECTION_NEEDS_REAUTH, ops)
    for kind, event_id in (
        (AlertKind.DEAD_LETTER, dl_id),
        (AlertKind.CONNECTION_NEEDS_REAUTH, ops),
    ):
        assert (await announced(stack, kind, event_id)).status == "success"
        await again(stack, stack.tenant_id, kind, event_id)

    alerts = [json.loads(d.body) for d in receiver.events.values() if d.path == "/ops-alerts"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for body in alerts:
        by_kind.setdefault(body["type"], []).append(body["data"])
    assert sorted(by_kind) == ["moat.alert.connection_needs_reauth", "moat.alert.dead_letter"]
    [dead] = by_kind["moat.alert.dead_letter"]
    assert dead["handle_with"] == f"moat dlq show {dl_id}"
    assert dead["console_url"] == "https://moat.example.test/console/dead-letters"
    assert "retries ran out" in dead["summary"]
    [reauth] = by_kind["moat.alert.connection_needs_reauth"]
    assert reauth["handle_with"] == f"moat connection show {ops}"
    # Each event reached the endpoint as one delivery: no second attempt, no second event.
    assert len([d for d in receiver.deliveries if d.path == "/ops-alerts"]) == 2


async def test_a_delivery_out_of_attempts_alerts_once(
    stack: Stack,
    slack: FakeSlack,
    receiver: FakeWebhookReceiver,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    ops = await stack.add_connection("slack", "xoxb-ops", config={"base_url": slack.base_url})
    channel = "CDLQ" + uuid.uuid4().hex[:6].upper()
    route(stack, ops, channel)
    receiver.status_next = [500, 500]  # the subscriber refuses both attempts
    await subscribe(stack, f"{receiver.base_url}/poison", max_retries=1, retry_base_seconds=0.05)
    relay = OutboxRelay.from_settings(
        stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
    )
    async with relay.running():
        await stack.execute("demo.echo", {"message": "hi"}, key="poison")
        for _ in range(200):
            async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
                letters = await dead_letters.list_dead_letters(
                    session, stack.tenant_id, DeadLetterStatus.OPEN, 10
                )
            if letters:
                break
            await asyncio.sleep(0.05)
    [letter] = letters
    assert (await announced(stack, AlertKind.DEAD_LETTER, letter.id)).status == "success"
    await again(stack, stack.tenant_id, AlertKind.DEAD_LETTER, letter.id)
    [message] = slack.posted(channel)
    assert f"moat dlq show {letter.id}" in message["text"] and "delivery" in message["text"]
