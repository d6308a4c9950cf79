"""Tenants' webhook subscriptions: add (the secret is shown once), list, rotate the secret
(the old one signs beside the new for a day), remove, and read the delivery attempts.

An endpoint URL is http(s) with a host; an address literal (in any form a resolver reads:
``2130706433`` and ``127.1`` are 127.0.0.1) must be public or on the worker's or tenant's
allow-list, by the rule the worker's host guard applies at every delivery
(``schemas.hosts.admits_address``). A name is judged there, resolved (a name may point
elsewhere by then)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.hosts import admits_address, canonical_host, literal_address, parse_allow_entry
from schemas.pages import Key
from schemas.quotas import Quota, QuotaLimits
from schemas.webhooks import (
    WEBHOOK_URL_PATTERN,
    Delivery,
    Webhook,
    WebhookCreate,
    WebhookWithSecret,
)
from starter.service import quotas
from starter.service.errors import MoatError
from store import db, outbox, tenants, webhooks
from store.keyrings.codec import OutputSealer
from store.models import WebhookSubscription


def webhook_not_found(subscription_id: str) -> MoatError:
    return MoatError(ErrorCode.WEBHOOK_NOT_FOUND, f"No webhook {subscription_id[:80]!r}.")


# The schema's rule (``WebhookCreate.url``): a URL it refuses is refused here too.
_URL = re.compile(WEBHOOK_URL_PATTERN)
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def check_url(url: str, allow: Iterable[str]) -> None:
    """Refuse a URL no delivery could be sent to, with what to do about it."""
    if not db.storable(url):
        raise MoatError(
            ErrorCode.WEBHOOK_URL_INVALID, "The webhook URL holds characters no URL has."
        )
    if not _URL.fullmatch(url):
        raise MoatError(
            ErrorCode.WEBHOOK_URL_INVALID,
            "A webhook URL is http:// or https:// with a host (a DNS name, an international "
            "one in its xn-- form, or an address), an optional port and no white space.",
        )
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as err:
        raise MoatError(ErrorCode.WEBHOOK_URL_INVALID, "The webhook URL does not parse.") from err
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise MoatError(
            ErrorCode.WEBHOOK_URL_INVALID, "A webhook URL is http:// or https:// with a host name."
        )
    host = canonical_host(parsed.host)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    address = literal_address(host)
    if address is None:
        return  # a name: judged resolved, at each delivery
    if admits_address(address, port, [parse_allow_entry(a) for a in allow]):
        return
    raise MoatError(
        ErrorCode.WEBHOOK_URL_NOT_ALLOWED,
        f"{host} is not a public address; an operator can allow-list it "
        "(MOAT_HTTP_ALLOW_HOSTS, or the tenant's list) to send webhooks there.",
        {"host": host, "port": port},
    )


async def add(
    session: AsyncSession,
    sealer: OutputSealer,
    tenant_id: str,
    body: WebhookCreate,
    worker_allow: Iterable[str],
    limits: QuotaLimits | None = None,
) -> WebhookWithSecret:
    tenant = await tenants.get_tenant(session, tenant_id)
    check_url(body.url, [*worker_allow, *(tenant.http_allow_hosts if tenant else [])])
    await quotas.guard(session, limits, tenant_id, Quota.WEBHOOKS)
    row, secret = await webhooks.create(
        session,
        sealer,
        tenant_id=tenant_id,
        url=body.url,
        events=[e.value for e in body.events],
        max_retries=body.max_retries,
        retry_base_seconds=body.retry_base_seconds,
    )
    return WebhookWithSecret(**webhooks.to_webhook(row).model_dump(), secret=secret)


async def list_webhooks(
    session: AsyncSession, tenant_id: str, after: Key | None = None, limit: int | None = None
) -> list[Webhook]:
    rows = await webhooks.list_active(session, tenant_id, after, limit)
    return [webhooks.to_webhook(r) for r in rows]


async def _found(
    session: AsyncSession, tenant_id: str, subscription_id: str
) -> WebhookSubscription:
    row = (
        await webhooks.get(session, tenant_id, subscription_id, lock=True)
        if _ID.match(subscription_id)
        else None
    )
    if row is None or row.status == "removed":
        raise webhook_not_found(subscription_id)
    return row


async def rotate(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, subscription_id: str
) -> WebhookWithSecret:
    row = await _found(session, tenant_id, subscription_id)
    secret = await webhooks.rotate(session, sealer, row, datetime.now(UTC))
    return WebhookWithSecret(**webhooks.to_webhook(row).model_dump(), secret=secret)


async def remove(session: AsyncSession, tenant_id: str, subscription_id: str) -> None:
    row = await _found(session, tenant_id, subscription_id)
    await webhooks.remove(session, row, datetime.now(UTC))
    await outbox.drop_pending(session, tenant_id, subscription_id)


async def deliveries(
    session: AsyncSession,
    tenant_id: str,
    subscription_id: str,
    limit: int,
    after: Key | None = None,
) -> list[Delivery]:
    row = (
        await webhooks.get(session, tenant_id, subscription_id)
        if _ID.match(subscription_id)
        else None
    )
    if row is None:
        raise webhook_not_found(subscription_id)
    return [
        Delivery.model_validate(d, from_attributes=True)
        for d in await outbox.deliveries(session, tenant_id, subscription_id, limit, after)
    ]
