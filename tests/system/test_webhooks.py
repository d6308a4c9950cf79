"""Tenants hear about outcomes: the outbox, signed deliveries, retries, dead letters.

Real gateway, worker, relay, Temporal and Postgres; the tenant's endpoint is a local server
written from the Standard Webhooks specification, and signatures are verified with the
``standardwebhooks`` package, not with Moat's signer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from standardwebhooks.webhooks import Webhook
from temporalio.api.enums.v1 import EventType as HistoryEvent
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import worker as worker_module
import workflows.deliver as deliver_module
from activities import DeliveryActivities, HostGuard
from schemas.events import EventDraft, EventType
from schemas.names import ATTEMPT_DELIVERY, PROBE_WORKFLOW
from schemas.probes import ProbeRunInput
from schemas.webhooks import (
    AttemptResult,
    DeliveryInput,
    WebhookEventType,
    delivery_workflow_id,
)
from starter.devstack import serve_asgi
from starter.runtime.outbox_relay import OutboxRelay
from starter.runtime.schedules import (
    create_probe_schedule,
    delete_probe_schedule,
    move_probe_schedules,
    probe_schedule_id,
)
from store import events as event_log
from store import outbox, receipts, tenancy
from store.keyrings.codec import OutputSealer
from store.models import OutboxRow, ReceiptRow
from tests.activities.test_outcomes import post
from tests.gateway.test_approvals import decide, pending, strict
from tests.gateway.test_policy import new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import CATALOG, Stack, StackFactory
from tests.support.webhook_endpoint import WebhookEndpoint
from workflows.deliver import ATTEMPT_HEARTBEAT_TIMEOUT

FAST_RETRIES = {"max_retries": 3, "retry_base_seconds": 0.05}


@pytest_asyncio.fixture(loop_scope="session")
async def endpoint() -> AsyncIterator[WebhookEndpoint]:
    app = WebhookEndpoint()
    async with serve_asgi(app) as url:
        app.base_url = url
        yield app


@asynccontextmanager
async def hooked_stack(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
    *,
    delivery_queue: str | None = None,
) -> AsyncIterator[Stack]:
    """A stack whose relay runs for its tenant; deliveries on ``delivery_queue`` if given."""
    async with make_stack(
        catalog=CATALOG, http_allow_hosts=[endpoint.allow_entry, provider.allow_entry]
    ) as stack:
        relay = OutboxRelay.from_settings(
            stack.client,
            app_sessions,
            stack.settings,
            task_queue=delivery_queue,
            tenant_id=stack.tenant_id,
        )
        async with relay.running():
            yield stack


async def subscribe(stack: Stack, url: str, *events: str, **extra: Any) -> dict[str, Any]:
    response = await stack.http.post(
        f"{stack.url}/v1/webhooks",
        json={"url": url, "events": list(events) or ["execution.completed"], **extra},
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def api(stack: Stack, method: str, path: str, **kwargs: Any) -> Any:
    response = await stack.http.request(
        method, stack.url + path, headers={"Authorization": f"Bearer {stack.api_key}"}, **kwargs
    )
    return response


async def rows_of(stack: Stack) -> list[OutboxRow]:
    async with stack.sessions() as s:
        return list(
            (
                await s.execute(
                    select(OutboxRow)
                    .where(OutboxRow.tenant_id == stack.tenant_id)
                    .order_by(OutboxRow.seq)
                )
            )
            .scalars()
            .all()
        )


async def settled(stack: Stack, count: int = 1) -> list[OutboxRow]:
    """The tenant's outbox rows once ``count`` of them are no longer pending."""
    for _ in range(1200):
        rows = await rows_of(stack)
        if len([r for r in rows if r.status != "pending"]) >= count:
            return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"outbox rows still pending: {await rows_of(stack)}")


async def test_signed_delivery(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        sub = await subscribe(stack, endpoint.script("/signed", 200))
        assert sub["secret"].startswith("whsec_")
        listed = (await api(stack, "GET", "/v1/webhooks")).json()["items"]
        assert [w["id"] for w in listed] == [sub["id"]]
        assert "secret" not in listed[0]  # shown once only
        body = (await stack.execute("demo.echo", {"message": "hi"}, key="signed")).json()
        [got] = await endpoint.wait_for("/signed", 1)
        payload = Webhook(sub["secret"]).verify(got.body, got.headers)
        assert payload["type"] == "execution.completed"
        assert payload["data"]["id"] == body["receipt_id"]
        assert payload["data"]["input_hash"].startswith("sha256:")
        assert got.webhook_id.startswith("msg_")
        # The attempt is recorded once the endpoint's answer is back, after it received it.
        row = next(r for r in await settled(stack) if r.status != "pending")
        # A worker killed mid-send has its attempt retried after the heartbeat timeout.
        history = await stack.client.get_workflow_handle(
            delivery_workflow_id(row.id, row.generation)
        ).fetch_history()
        [scheduled] = [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.event_type == HistoryEvent.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
        assert scheduled.activity_type.name == ATTEMPT_DELIVERY
        assert scheduled.heartbeat_timeout.ToTimedelta() == ATTEMPT_HEARTBEAT_TIMEOUT
        deliveries = (await api(stack, "GET", f"/v1/webhooks/{sub['id']}/deliveries")).json()
        [attempt] = deliveries["items"]
        assert (attempt["http_status"], attempt["outcome"]) == (200, "delivered")
        assert attempt["webhook_id"] == got.webhook_id

        # Rotation: both secrets sign for a day, so either verifies.
        rotated = (await api(stack, "POST", f"/v1/webhooks/{sub['id']}/rotate-secret")).json()
        assert rotated["secret"] != sub["secret"]
        await stack.execute("demo.echo", {"message": "again"}, key="signed-2")
        [_, second] = await endpoint.wait_for("/signed", 2)
        assert len(second.headers["webhook-signature"].split(" ")) == 2
        Webhook(sub["secret"]).verify(second.body, second.headers)
        Webhook(rotated["secret"]).verify(second.body, second.headers)


async def test_endpoint_down_then_up(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        url = endpoint.script("/flaky", 503, 500, 200)
        await subscribe(stack, url, **FAST_RETRIES)
        await stack.execute("demo.echo", {"message": "hi"}, key="flaky")
        [accepted] = await endpoint.wait_for("/flaky", 1)
        calls = endpoint.to("/flaky")
        assert [c.status for c in calls] == [503, 500, 200]
        assert {c.webhook_id for c in calls} == {accepted.webhook_id}
        [row] = await settled(stack)
        assert (row.status, row.attempts) == ("delivered", 3)


class CrashAfterSend(DeliveryActivities):
    """Dies once between the send and the mark, as a killed worker would."""

    crashed = False

    async def _mark(self, inp: DeliveryInput, sent: Any, sub: Any) -> AttemptResult:
        if sent is not None and not CrashAfterSend.crashed:
            CrashAfterSend.crashed = True
            raise RuntimeError("worker killed between send and mark")
        return await super()._mark(inp, sent, sub)


async def test_killed_between_send_and_mark(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    queue = f"tq-deliver-{uuid.uuid4().hex}"
    async with hooked_stack(
        make_stack, app_sessions, endpoint, provider, delivery_queue=queue
    ) as stack:
        async with worker_module.activity_deps(stack.settings) as (sessions, http):
            acts = CrashAfterSend(
                sessions,
                http,
                HostGuard(stack.settings.http_allow_hosts),
                OutputSealer.from_settings(stack.settings),
            )
            deliverer = Worker(
                stack.client,
                task_queue=queue,
                workflows=[worker_module.DeliverWebhook],
                activities=[acts.attempt_delivery],
            )
            async with deliverer:
                await subscribe(stack, endpoint.script("/crash", 200))
                await stack.execute("demo.echo", {"message": "hi"}, key="crash")
                first, second = await endpoint.wait_for("/crash", 2)
                [row] = await settled(stack)
        assert CrashAfterSend.crashed
        assert first.webhook_id == second.webhook_id
        assert first.body == second.body
        assert len(endpoint.to("/crash")) == 2  # and nothing else
        assert (row.status, row.attempts) == ("delivered", 1)


async def test_poison_endpoint_dead_letter_then_requeue(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        url = endpoint.script("/poison", 500)
        sub = await subscribe(stack, url, max_retries=1, retry_base_seconds=0.05)
        await stack.execute("demo.echo", {"message": "hi"}, key="poison")
        await endpoint.wait_for("/poison", 2, accepted=False)
        await settled(stack)
        [letter] = (await api(stack, "GET", "/v1/dead-letters")).json()["items"]
        assert (letter["kind"], letter["error_code"]) == ("delivery", "retries_exhausted")
        [row] = await rows_of(stack)
        assert (row.status, row.attempts) == ("dead_letter", 2)
        assert len(endpoint.to("/poison")) == 2

        endpoint.script("/poison", 200)
        requeued = await api(stack, "POST", f"/v1/dead-letters/{letter['id']}/requeue", json={})
        assert requeued.status_code == 200, requeued.text
        assert requeued.json()["status"] == "requeued"
        [accepted] = await endpoint.wait_for("/poison", 1)
        assert accepted.webhook_id == endpoint.to("/poison")[0].webhook_id
        again = await api(stack, "POST", f"/v1/dead-letters/{letter['id']}/requeue", json={})
        assert again.json()["error"]["code"] == "dead_letter_closed"
        # The requeue is an event, with the operator's key as its actor.
        async with stack.sessions() as s:
            events = await event_log.events_of(s, stack.tenant_id, row.id)
        [event] = events
        assert event.event_type == EventType.DEAD_LETTER_REQUEUED
        assert event.actor == "api_key:" + stack.api_key.split("_")[1]
        await settled(stack)  # the accepted attempt is recorded after the endpoint answered
        deliveries = (await api(stack, "GET", f"/v1/webhooks/{sub['id']}/deliveries")).json()
        assert [d["http_status"] for d in deliveries["items"]] == [200, 500, 500]


async def test_gone_disables_the_subscription(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        sub = await subscribe(stack, endpoint.script("/gone", 410), **FAST_RETRIES)
        await stack.execute("demo.echo", {"message": "hi"}, key="gone")
        await endpoint.wait_for("/gone", 1, accepted=False)
        await settled(stack)
        [listed] = (await api(stack, "GET", "/v1/webhooks")).json()["items"]
        assert listed["id"] == sub["id"]
        assert listed["status"] == "disabled"
        assert "410" in listed["disabled_reason"]
        await stack.execute("demo.echo", {"message": "after"}, key="gone-2")
        assert len(endpoint.to("/gone")) == 1  # never retried, nothing more announced
        [row] = await rows_of(stack)
        assert row.status == "dead_letter"


class Fault(Exception):
    pass


async def test_outbox_row_and_receipt_commit_together(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault injected between the outbox row and the commit of the receipt leaves
    neither; a fault in writing the outbox row takes the receipt with it."""
    await subscribe(stack, "https://hooks.example.com/x", "execution.completed")
    body = (await stack.execute("demo.echo", {"message": "hi"}, key="atomic")).json()
    async with stack.sessions() as s:
        receipt = await receipts.get_receipt(s, stack.tenant_id, body["receipt_id"])
        events = await event_log.events_of(s, stack.tenant_id, body["receipt_id"])
    assert receipt is not None
    [outcome] = [e for e in events if e.event_type == EventType.RUN_COMPLETED]
    [row] = await rows_of(stack)
    assert (row.event_id, row.aggregate_id) == (outcome.id, receipt.id)

    # The same receipt and outcome event again, as new ones, in a transaction that fails
    # after the outbox row is written.
    copy = receipt.model_copy(update={"id": str(uuid.uuid4())})
    draft = EventDraft(**outcome.model_dump(exclude={"sequence_number", "occurred_at"})).model_copy(
        update={"id": str(uuid.uuid4()), "correlation_id": copy.id}
    )
    with pytest.raises(Fault):
        async with app_sessions.begin() as session:
            await tenancy.set_tenant(session, stack.tenant_id)
            assert await receipts.insert_receipt(session, copy)
            await event_log.append(session, [draft])
            assert len(await rows_of_in(session, stack.tenant_id)) == 2
            raise Fault
    assert len(await rows_of(stack)) == 1
    async with stack.sessions() as s:
        count = await s.scalar(select(func.count()).where(ReceiptRow.id == copy.id))
    assert count == 0

    async def failing_enqueue(*args: Any, **kwargs: Any) -> int:
        raise Fault

    monkeypatch.setattr(outbox, "enqueue", failing_enqueue)
    with pytest.raises(Fault):
        async with app_sessions.begin() as session:
            await tenancy.set_tenant(session, stack.tenant_id)
            assert await receipts.insert_receipt(session, copy)
            await event_log.append(session, [draft])
    async with stack.sessions() as s:
        count = await s.scalar(select(func.count()).where(ReceiptRow.id == copy.id))
    assert count == 0


async def rows_of_in(session: AsyncSession, tenant_id: str) -> list[OutboxRow]:
    stmt = select(OutboxRow).where(OutboxRow.tenant_id == tenant_id)
    return list((await session.execute(stmt)).scalars().all())


async def test_dead_lettered_execution_in_order_with_compensating_action(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    """One execution's events reach the endpoint in event order even when the first needs
    a retry; the dead-lettered execution is in the dead-letter list, its manifest points at
    its compensating-action record, and it is requeued only on an operator's statement."""
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        hook = endpoint.script("/ordered", 503, 200)
        await subscribe(
            stack,
            hook,
            "execution.failed",
            "execution.dead_lettered",
            "execution.completed",
            **FAST_RETRIES,
        )
        target = provider.script("/always-500", Step(500))
        body = (await stack.execute("test.http", post(target), key="dead")).json()
        assert body["status"] == "failed"
        got = await endpoint.wait_for("/ordered", 2)
        await settled(stack, 2)
        async with stack.sessions() as s:
            events = await event_log.events_of(s, stack.tenant_id, body["receipt_id"])
        announced = [
            e.id
            for e in events
            if e.event_type in (EventType.EFFECT_DEAD_LETTERED, EventType.RUN_FAILED)
        ]
        assert [g.webhook_id for g in got] == [f"msg_{i}" for i in announced]
        assert [g.json["type"] for g in got] == ["execution.dead_lettered", "execution.failed"]
        # The second event was not sent before the first was accepted.
        calls = endpoint.to("/ordered")
        assert [c.status for c in calls] == [503, 200, 200]
        assert calls[0].webhook_id == calls[1].webhook_id

        [letter] = (await api(stack, "GET", "/v1/dead-letters")).json()["items"]
        assert (letter["kind"], letter["subject_id"]) == ("execution", body["receipt_id"])
        manifest = await api(stack, "GET", f"/v1/executions/{body['receipt_id']}/manifest")
        ref = manifest.json()["outputs"]["compensating_action_ref"]
        record = (await api(stack, "GET", ref)).json()
        assert record["id"] == letter["compensating_action_id"]
        assert record["receipt_id"] == body["receipt_id"]
        assert record["effect"] == "unknown"
        assert record["attempted"]["capability_id"] == "test.http"

        path = f"/v1/dead-letters/{letter['id']}/requeue"
        refused = await api(stack, "POST", path, json={})
        assert refused.json()["error"]["code"] == "effect_statement_required"
        provider.script("/always-500", Step(200))
        requeued = await api(
            stack, "POST", path, json={"effect_did_not_happen": True, "note": "checked"}
        )
        assert requeued.status_code == 200, requeued.text
        new_receipt = requeued.json()["requeued_as"]
        completed = (await endpoint.wait_for("/ordered", 3))[2]
        assert completed.json["type"] == "execution.completed"
        assert completed.json["data"]["id"] == new_receipt
        assert completed.json["data"]["idempotency_key"].startswith("dead#requeue-")
        record = (await api(stack, "GET", ref)).json()
        assert record["effect"] == "did_not_happen"
        assert record["operator_actions"][0]["requeued_as"] == new_receipt
        keys = [c.headers.get("idempotency-key") for c in provider.calls_to("/always-500")]
        assert len(set(keys)) == 2  # the new attempt went under a new downstream key
        assert keys[-1] not in keys[:-1]


async def test_relay_dying_before_its_mark_starts_nothing_twice(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with make_stack(http_allow_hosts=[endpoint.allow_entry]) as stack:
        await subscribe(stack, endpoint.script("/relay-crash", 200))
        await stack.execute("demo.echo", {"message": "hi"}, key="relay-crash")
        relay = OutboxRelay.from_settings(
            stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
        )
        mark = outbox.mark_dispatched

        async def dies(*args: Any) -> None:
            raise Fault

        monkeypatch.setattr(outbox, "mark_dispatched", dies)
        with pytest.raises(Fault):
            await relay.dispatch()  # started the workflow, then died before marking
        monkeypatch.setattr(outbox, "mark_dispatched", mark)
        assert await relay.dispatch() == 1  # the row is due again: started again...
        assert await relay.dispatch() == 0
        await endpoint.wait_for("/relay-crash", 1)
        await settled(stack)
        assert len(endpoint.to("/relay-crash")) == 1  # ...as the same workflow


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://10.1.2.3/hook", "webhook_url_not_allowed"),
        ("http://127.0.0.1:9/hook", "webhook_url_not_allowed"),
        ("http://[::ffff:169.254.169.254]/hook", "webhook_url_not_allowed"),
        ("ftp://hooks.example.com/hook", "webhook_url_invalid"),
        ("hooks.example.com/hook", "webhook_url_invalid"),
    ],
)
async def test_endpoint_urls_pass_the_host_guard(stack: Stack, url: str, code: str) -> None:
    response = await api(
        stack, "POST", "/v1/webhooks", json={"url": url, "events": ["execution.failed"]}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


async def test_approvals_are_announced_in_order_with_the_outcome(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
) -> None:
    """``approval.requested`` then ``approval.decided`` then ``execution.completed``, each
    signed, the approval as the API answers it without the call's input."""
    async with hooked_stack(make_stack, app_sessions, endpoint, provider) as stack:
        sub = await subscribe(
            stack,
            endpoint.script("/approvals", 200),
            "approval.requested",
            "approval.decided",
            "execution.completed",
        )
        await put_policy(stack, await new_key(stack, ["policy:write"]), strict())
        url = provider.script("/approved-call", Step(201, {"ok": True}))
        first = await pending(stack, url, "announce-approval")
        approval = first["approval"]
        approver = await new_key(stack, ["approvals:write"])
        decided = await decide(stack, approver, approval)
        assert decided.status_code == 200, decided.text
        got = await endpoint.wait_for("/approvals", 3)
        payloads = [Webhook(sub["secret"]).verify(g.body, g.headers) for g in got]
        assert [p["type"] for p in payloads] == [
            "approval.requested",
            "approval.decided",
            "execution.completed",
        ]
        requested, granted, completed = (p["data"] for p in payloads)
        assert requested["id"] == granted["id"] == approval["id"]
        assert (requested["status"], granted["status"]) == ("pending", "approved")
        assert granted["approved_digest"] == approval["input_hash"]
        assert "input" not in requested and "input" not in granted
        assert completed["id"] == first["receipt_id"]
        assert len({g.webhook_id for g in got}) == 3


class RawEndpoint:
    """A tenant endpoint that misbehaves below HTTP's level, on a plain socket: it answers
    ``200`` with a body of ``size`` bytes, sent ``chunk`` bytes at a time every ``every``
    seconds (a byte now and then: a drip; large chunks, no pause: a flood). It counts the
    requests, the connections open now and the bytes it managed to send."""

    def __init__(self, size: int, chunk: int, every: float) -> None:
        self.size, self.chunk, self.every = size, chunk, every
        self.requests = 0
        self.open = 0
        self.sent = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Condition()
        self._closing = False

    async def until(self, test: Callable[[], bool]) -> None:
        """Wait until ``test()`` holds (it reads ``open``)."""
        async with self._changed:
            await self._changed.wait_for(test)

    async def _count(self, change: int) -> None:
        async with self._changed:
            self.open += change
            self._changed.notify_all()

    def hang_up(self) -> None:
        """Close every connection, and each one that arrives from now on."""
        self._closing = True
        for writer in list(self._writers):
            writer.close()

    @property
    def allow_entry(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def url(self, path: str) -> str:
        return f"http://{self.allow_entry}{path}"

    async def __aenter__(self) -> RawEndpoint:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.hang_up()
        await self._server.wait_closed()
        async with asyncio.timeout(5):
            await self.until(lambda: self.open == 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._count(1)
        self._writers.add(writer)
        try:
            if self._closing:
                return
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            self.requests += 1
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {self.size}\r\n\r\n".encode())
            left = self.size
            while left > 0 and not self._closing:
                piece = min(self.chunk, left)
                writer.write(b"x" * piece)
                await writer.drain()
                self.sent += piece
                left -= piece
                if self.every:
                    await asyncio.sleep(self.every)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up on the answer: what these tests are about
        finally:
            await self._count(-1)
            self._writers.discard(writer)
            writer.close()


async def outcome_within(stack: Stack, seconds: float) -> OutboxRow:
    """The tenant's one outbox row once it is no longer pending; fails past ``seconds``."""
    async with asyncio.timeout(seconds):
        while True:
            rows = await rows_of(stack)
            if rows and rows[0].status != "pending":
                return rows[0]
            await asyncio.sleep(0.05)


async def test_dripping_endpoint_attempts_end_at_the_deadline_and_are_dead_lettered(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    """An endpoint that sends its answer a byte at a time never trips the per-read timeout;
    the attempt's deadline ends each attempt, which counts, and the row is dead-lettered
    after ``max_retries``, not retried for ever."""
    deadline = 1.0
    async with (
        RawEndpoint(size=1000, chunk=1, every=0.2) as drip,
        make_stack(
            http_allow_hosts=[drip.allow_entry],
            webhook_timeout_seconds=5.0,  # per read: the drip never trips it
            webhook_deadline_seconds=deadline,
        ) as stack,
    ):
        relay = OutboxRelay.from_settings(
            stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
        )
        async with relay.running():
            sub = await subscribe(stack, drip.url("/drip"), max_retries=1, retry_base_seconds=0.05)
            await stack.execute("demo.echo", {"message": "hi"}, key="drip")
            row = await outcome_within(stack, 30)
        [letter] = (await api(stack, "GET", "/v1/dead-letters")).json()["items"]
        deliveries = (await api(stack, "GET", f"/v1/webhooks/{sub['id']}/deliveries")).json()
    assert (row.status, row.attempts) == ("dead_letter", 2)
    assert (letter["kind"], letter["error_code"]) == ("delivery", "retries_exhausted")
    assert drip.requests == 2
    assert [d["attempt"] for d in deliveries["items"]] == [2, 1]
    for attempt in deliveries["items"]:
        assert attempt["outcome"] == "failed"
        assert "deadline" in attempt["error"]
        assert deadline * 1000 <= attempt["latency_ms"] < (deadline + 2) * 1000


async def test_a_huge_answer_is_read_only_up_to_the_cap(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    """An endpoint answering 200 with 64 MiB: the delivery counts, and the worker stops
    reading after the first bytes instead of taking all of it in."""
    size = 64 * 1024 * 1024
    async with (
        RawEndpoint(size=size, chunk=64 * 1024, every=0) as flood,
        make_stack(http_allow_hosts=[flood.allow_entry]) as stack,
    ):
        relay = OutboxRelay.from_settings(
            stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
        )
        async with relay.running():
            await subscribe(stack, flood.url("/flood"))
            await stack.execute("demo.echo", {"message": "hi"}, key="flood")
            row = await outcome_within(stack, 30)
        async with asyncio.timeout(10):  # the endpoint notices the closed connection
            await flood.until(lambda: flood.open == 0)
    assert (row.status, row.attempts) == ("delivered", 1)
    assert flood.requests == 1
    # What reached the socket before the reader left: the read cap plus kernel buffers.
    assert flood.sent < size // 4, flood.sent


# Activity slots (and HTTP connections) of the one worker that served executions and
# deliveries alike before deliveries had a queue of their own.
SHARED_SLOTS = 200


async def holding(endpoint: RawEndpoint, at_least: int) -> int:
    """Connections open to ``endpoint`` once there are ``at_least`` and no more arrive for
    two seconds."""
    async with asyncio.timeout(60):
        await endpoint.until(lambda: endpoint.open >= at_least)
    while True:
        before = endpoint.open
        try:
            async with asyncio.timeout(2.0):
                await endpoint.until(lambda seen=before: endpoint.open != seen)
        except TimeoutError:
            return before


async def test_an_execution_runs_promptly_while_deliveries_hold_every_delivery_slot(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Deliveries to an endpoint that never finishes answering take every slot of the
    delivery worker; a tenant's execution is not queued behind them."""
    slots = 4
    async with (
        RawEndpoint(size=100_000, chunk=1, every=0.5) as drip,
        make_stack(
            http_allow_hosts=[drip.allow_entry],
            wait_seconds=15.0,
            webhook_timeout_seconds=30.0,
            webhook_deadline_seconds=40.0,
            delivery_max_concurrent_activities=slots,
            delivery_max_connections=slots,
        ) as stack,
    ):
        await subscribe(stack, drip.url("/slow"))
        async with app_sessions.begin() as session:
            await tenancy.set_tenant(session, stack.tenant_id)
            for _ in range(SHARED_SLOTS):
                await outbox.enqueue(
                    session,
                    tenant_id=stack.tenant_id,
                    event_type=WebhookEventType.EXECUTION_COMPLETED,
                    aggregate_id=str(uuid.uuid4()),
                    data={"slow": True},
                )
        relay = OutboxRelay.from_settings(
            stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
        )
        async with relay.running():
            held = await holding(drip, slots)
            started = time.monotonic()
            response = await stack.execute("demo.echo", {"message": "hi"}, key="prompt")
            took = time.monotonic() - started
            still_held = drip.open
        drip.hang_up()  # the attempts end now, not at their deadline
    assert response.status_code in (200, 201), response.text
    assert response.json()["status"] == "executed"
    # Before deliveries had their own queue it never ran: 202 at the 15 s wait, all 200 slots
    # held by the endpoint. Here it takes about a second on an idle machine; the bound leaves
    # room for a loaded one (the same process also runs the 200 delivery workflows' tasks).
    assert took < 10.0, took
    assert held == still_held == slots  # every delivery slot was taken throughout


async def test_probe_schedules_start_their_runs_on_the_delivery_queue(
    make_stack: StackFactory,
) -> None:
    """New probe schedules start on the delivery queue; one made before (on the execution
    queue) is moved there when a worker starts, and only this deployment's."""
    async with make_stack(with_worker=False) as stack:
        settings = stack.settings
        probe_id = f"p{uuid.uuid4().hex}"
        made = await create_probe_schedule(
            stack.client, settings, stack.tenant_id, probe_id, timedelta(hours=1)
        )
        old_id, other_id = f"p{uuid.uuid4().hex}", f"p{uuid.uuid4().hex}"
        for pid, queue in ((old_id, settings.task_queue), (other_id, "another-deployment")):
            await stack.client.create_schedule(
                probe_schedule_id(pid),
                Schedule(
                    action=ScheduleActionStartWorkflow(
                        PROBE_WORKFLOW,
                        ProbeRunInput(tenant_id=stack.tenant_id, probe_id=pid),
                        id=f"{probe_schedule_id(pid)}-run",
                        task_queue=queue,
                    ),
                    spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
                    state=ScheduleState(paused=True),
                ),
            )
        try:
            for _ in range(150):  # until the schedule list shows the old one
                if await move_probe_schedules(stack.client, settings):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the old probe schedule was never moved")
            assert await move_probe_schedules(stack.client, settings) == 0

            async def queue_of(schedule_id: str) -> str:
                handle = stack.client.get_schedule_handle(schedule_id)
                action = (await handle.describe()).schedule.action
                assert isinstance(action, ScheduleActionStartWorkflow)
                return action.task_queue

            deliveries = settings.deliveries_task_queue
            assert deliveries == f"{settings.task_queue}-deliveries"
            assert await queue_of(made) == deliveries
            assert await queue_of(probe_schedule_id(old_id)) == deliveries
            assert await queue_of(probe_schedule_id(other_id)) == "another-deployment"
        finally:
            for pid in (probe_id, old_id, other_id):
                await delete_probe_schedule(stack.client, pid)


class AlwaysFails(DeliveryActivities):
    """An attempt that can never complete inside Moat (its worker lost every time)."""

    async def _attempt(self, inp: DeliveryInput) -> AttemptResult:
        raise RuntimeError("lost mid-send")


async def test_an_attempt_that_never_completes_is_not_retried_for_ever(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Temporal retries the attempt a bounded number of times; then the try counts as an
    attempt and the row is a dead letter an operator can requeue."""
    # Test-sized retries; the workflow reads the module's policy when run unsandboxed.
    monkeypatch.setattr(
        deliver_module,
        "ATTEMPT_RETRY",
        RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=3),
    )
    queue = f"tq-deliver-{uuid.uuid4().hex}"
    async with (
        hooked_stack(make_stack, app_sessions, endpoint, provider, delivery_queue=queue) as stack,
        worker_module.activity_deps(stack.settings) as (sessions, http),
    ):
        acts = AlwaysFails(
            sessions,
            http,
            HostGuard(stack.settings.http_allow_hosts),
            OutputSealer.from_settings(stack.settings),
        )
        async with Worker(
            stack.client,
            task_queue=queue,
            workflows=[worker_module.DeliverWebhook],
            activities=[acts.attempt_delivery, acts.give_up_delivery],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            sub = await subscribe(stack, endpoint.script("/lost", 200))
            await stack.execute("demo.echo", {"message": "hi"}, key="lost")
            row = await outcome_within(stack, 30)
        [letter] = (await api(stack, "GET", "/v1/dead-letters")).json()["items"]
        deliveries = (await api(stack, "GET", f"/v1/webhooks/{sub['id']}/deliveries")).json()
    assert (row.status, row.attempts) == ("dead_letter", 1)
    assert (letter["kind"], letter["error_code"]) == ("delivery", "attempt_failed")
    [attempt] = deliveries["items"]
    assert attempt["outcome"] == "failed"
    assert attempt["error"] == "3 tries failed, the last with RuntimeError"
    assert "mid-send" not in letter["reason"]  # the kind of failure, never its text
