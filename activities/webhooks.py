"""Delivering an outbox row to a tenant's endpoint, Standard Webhooks style: one attempt
per activity, marked in the transaction after the send. A crash between the send and the
mark re-sends the same event with the same ``webhook-id``, which the standard lets the
receiver dedupe on.

The retry schedule is the subscription's: after the n-th failure wait
``retry_base_seconds * 2^(n-1)`` (2, 4, 8 s by default) with jitter, or longer when the
endpoint answers ``Retry-After``; past ``max_retries`` the row is a dead letter. ``410
Gone`` disables the subscription.

Every attempt ends, and is counted, whatever the endpoint does: the send (connecting, the
request, the answer) runs under one deadline (``MOAT_WEBHOOK_DEADLINE_SECONDS``), not just
the HTTP client's per-read timeout, which an endpoint dripping a byte at a time never trips;
and the answer is read only up to ``ANSWER_BYTES`` (the adapters' capped read), since
nothing but its status is kept."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters import HostGuard, SendRequest, parse_retry_after, send
from activities.alerts import Alerter
from activities.heartbeat import heartbeating
from schemas.alerts import AlertKind
from schemas.names import ATTEMPT_DELIVERY, GIVE_UP_DELIVERY
from schemas.webhooks import (
    WEBHOOK_SECRET_PREFIX,
    AttemptResult,
    DeliveryGiveUp,
    DeliveryInput,
    OutboxStatus,
    SubscriptionStatus,
    delivery_dead_letter_id,
    webhook_id_for,
)
from store import dead_letters, outbox, tenancy, tenants, webhooks
from store.keyrings.codec import OutputSealer
from store.models import OutboxRow, WebhookSubscription

JITTER = 0.2  # each wait is drawn from ±20 % of the schedule's, so retries spread out
MAX_ERROR_CHARS = 300
# The most of an endpoint's answer read: only its status matters, and a small answer read to
# its end leaves the connection reusable.
ANSWER_BYTES = 16 * 1024


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` over ``id.timestamp.body``, keyed by the secret's bytes
    (the base64 after ``whsec_``)."""
    key = base64.b64decode(secret.removeprefix(WEBHOOK_SECRET_PREFIX))
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def body_of(row: OutboxRow) -> bytes:
    """The same bytes on every attempt: ``{"type", "timestamp", "data"}``."""
    doc = {"type": row.event_type, "timestamp": row.occurred_at.isoformat(), "data": row.payload}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def retry_delay(base: float, failures: int, retry_after: timedelta | None) -> float:
    """Seconds to wait after the ``failures``-th failure."""
    delay: float = base * 2.0 ** (failures - 1) * random.uniform(1 - JITTER, 1 + JITTER)
    if retry_after is not None:
        delay = max(delay, retry_after.total_seconds())
    return delay


@dataclass(frozen=True)
class Sent:
    """What one send came to."""

    http_status: int | None
    latency_ms: int
    error: str | None
    retry_after: timedelta | None = None


class DeliveryActivities:
    """Built once in ``worker.py``."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        http: httpx.AsyncClient,
        guard: HostGuard,
        sealer: OutputSealer,
        *,
        timeout_seconds: float = 10.0,
        deadline_seconds: float = 15.0,
        alerter: Alerter | None = None,
    ) -> None:
        self._alerter = alerter
        self._sessions = sessions
        self._http = http
        self._guard = guard
        self._sealer = sealer
        self._timeout = timeout_seconds
        self._deadline = deadline_seconds

    @activity.defn(name=ATTEMPT_DELIVERY)
    async def attempt_delivery(self, inp: DeliveryInput) -> AttemptResult:
        async with heartbeating():  # the reads and the mark wait on PostgreSQL too
            result = await self._attempt(inp)
        await self._alert(inp, result)
        return result

    async def _alert(self, inp: DeliveryInput | DeliveryGiveUp, result: AttemptResult) -> None:
        """A dead-lettered row's alert, handed off after the transaction that dead-lettered
        it, on every attempt that finds it so (a retry after a lost hand-off sends it)."""
        if self._alerter is None or result.status != OutboxStatus.DEAD_LETTER.value:
            return
        dl_id = delivery_dead_letter_id(inp.outbox_id, inp.generation)
        await self._alerter.hand_off(inp.tenant_id, AlertKind.DEAD_LETTER, dl_id)

    async def _attempt(self, inp: DeliveryInput) -> AttemptResult:
        now = datetime.now(UTC)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            row = await outbox.get(session, inp.tenant_id, inp.outbox_id)
            if (settled := _settled(row, inp.generation)) is not None:
                return settled
            assert row is not None
            sub = await webhooks.get(session, inp.tenant_id, row.subscription_id)
            tenant = await tenants.get_tenant(session, inp.tenant_id)
            allow = list(tenant.http_allow_hosts) if tenant is not None else []
        if sub is None or sub.status != SubscriptionStatus.ACTIVE.value:
            return await self._mark(inp, None, sub)
        sent = await self._send(row, sub, allow, now)
        return await self._mark(inp, sent, sub)

    async def _send(
        self, row: OutboxRow, sub: WebhookSubscription, allow: list[str], now: datetime
    ) -> Sent:
        secrets = webhooks.signing_secrets(self._sealer, sub, now)
        body = body_of(row)
        webhook_id = webhook_id_for(row.event_id)
        stamp = int(now.timestamp())
        keys = [k for k in (secrets.current, secrets.previous) if k is not None]
        headers: dict[str, str] = {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": " ".join(sign(k, webhook_id, stamp, body) for k in keys),
            "content-type": "application/json",
            "User-Agent": "moat-webhooks/0.1",
        }
        started = time.monotonic()
        try:
            # One deadline over the whole exchange: the per-read timeout alone lets an
            # endpoint that sends a byte now and then hold the attempt for ever.
            async with asyncio.timeout(self._deadline):
                answer = await send(
                    self._http,
                    self._guard,
                    SendRequest(
                        "POST",
                        sub.url,
                        headers=headers,
                        timeout=self._timeout,
                        allow_hosts=allow,
                        max_response_bytes=ANSWER_BYTES,
                        content=body,
                    ),
                )
        except TimeoutError:
            late = f"no complete answer within the {self._deadline:g}s deadline"
            return Sent(None, _since(started), late)
        except ApplicationError as err:  # the host guard's refusal, a timeout, no connection
            # The adapters' wording, where the other side is the tenant's endpoint.
            said = err.message.replace("the provider", "the endpoint")
            return Sent(None, _since(started), said[:MAX_ERROR_CHARS])
        response = answer.response
        error = None if response.is_success else f"endpoint answered HTTP {response.status_code}"
        return Sent(
            response.status_code,
            _since(started),
            error,
            parse_retry_after(response.headers.get("retry-after")),
        )

    async def _mark(
        self, inp: DeliveryInput, sent: Sent | None, sub: WebhookSubscription | None
    ) -> AttemptResult:
        """The attempt's outcome, in one transaction; ``sent`` None: the subscription is
        gone, nothing was sent."""
        now = datetime.now(UTC)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            row = await outbox.lock(session, inp.tenant_id, inp.outbox_id)
            if (settled := _settled(row, inp.generation)) is not None:
                return settled
            assert row is not None
            if sent is None:
                reason = "the subscription is " + (sub.status if sub is not None else "gone")
                await _dead_letter(session, row, reason, "subscription_disabled")
                return AttemptResult(final=True, status=OutboxStatus.DEAD_LETTER.value)
            gone = sent.http_status == httpx.codes.GONE
            ok = sent.error is None
            await outbox.record_attempt(
                session,
                row,
                webhook_id=webhook_id_for(row.event_id),
                attempted_at=now - timedelta(milliseconds=sent.latency_ms),
                http_status=sent.http_status,
                latency_ms=sent.latency_ms,
                outcome="delivered" if ok else "gone" if gone else "failed",
                error=sent.error,
            )
            row.attempts += 1
            if ok:
                row.status = OutboxStatus.DELIVERED.value
                row.delivered_at = now
                row.last_error = None
                row.next_attempt_at = None
                return AttemptResult(final=True, status=row.status)
            row.last_error = sent.error
            if gone:
                locked = await webhooks.get(session, inp.tenant_id, row.subscription_id, lock=True)
                if locked is not None:
                    await webhooks.disable(session, locked, "endpoint answered 410 Gone", now)
                await _dead_letter(session, row, "the endpoint answered 410 Gone", "gone")
                return AttemptResult(final=True, status=row.status)
            max_retries = sub.max_retries if sub is not None else 0
            if row.attempts > max_retries:
                reason = f"no successful delivery in {row.attempts} attempts: {sent.error}"
                await _dead_letter(session, row, reason, "retries_exhausted")
                return AttemptResult(final=True, status=row.status)
            base = sub.retry_base_seconds if sub is not None else 2.0
            delay = retry_delay(base, row.attempts, sent.retry_after)
            row.next_attempt_at = now + timedelta(seconds=delay)
            return AttemptResult(final=False, status=row.status, retry_in_seconds=delay)

    @activity.defn(name=GIVE_UP_DELIVERY)
    async def give_up_delivery(self, inp: DeliveryGiveUp) -> AttemptResult:
        """The row's attempt kept failing inside Moat (Temporal gave up retrying it): that
        counts as one more failed attempt, and the row is a dead letter, for an operator to
        requeue once the cause is fixed."""
        result = await self._give_up(inp)
        await self._alert(inp, result)
        return result

    async def _give_up(self, inp: DeliveryGiveUp) -> AttemptResult:
        now = datetime.now(UTC)
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, inp.tenant_id)
            row = await outbox.lock(session, inp.tenant_id, inp.outbox_id)
            if (settled := _settled(row, inp.generation)) is not None:
                return settled
            assert row is not None
            await outbox.record_attempt(
                session,
                row,
                webhook_id=webhook_id_for(row.event_id),
                attempted_at=now,
                http_status=None,
                latency_ms=0,
                outcome="failed",
                error=inp.error[:MAX_ERROR_CHARS],
            )
            row.attempts += 1
            reason = f"the delivery attempt could not be completed: {inp.error}"
            await _dead_letter(session, row, reason, "attempt_failed")
            return AttemptResult(final=True, status=row.status)


def _settled(row: OutboxRow | None, generation: int) -> AttemptResult | None:
    """The final answer of an attempt whose row is no longer its pending delivery (a requeue
    made a new generation, or it was delivered or dead-lettered meanwhile), else None."""
    if row is None or row.generation != generation:
        return AttemptResult(final=True, status="superseded")
    if row.status != OutboxStatus.PENDING.value:
        return AttemptResult(final=True, status=row.status)
    return None


async def _dead_letter(session: AsyncSession, row: OutboxRow, reason: str, code: str) -> None:
    row.status = OutboxStatus.DEAD_LETTER.value
    row.last_error = reason[:MAX_ERROR_CHARS]
    row.next_attempt_at = None
    await dead_letters.record_delivery(session, row, reason[:MAX_ERROR_CHARS], code)
    await session.flush()


def _since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
