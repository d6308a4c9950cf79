"""Webhook routes: a tenant's subscriptions (the signing secret is shown once, on creation
and on rotation) and each subscription's delivery attempts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.scopes import WEBHOOKS_WRITE
from schemas.webhooks import DeliveryList, WebhookCreate, WebhookList, WebhookWithSecret
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of, sealer_of
from starter.gateway.errors import EnvelopeJSONResponse as JSONResponse
from starter.gateway.errors import documented_errors
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit, by_creation
from starter.service import pages, webhooks

router = APIRouter()


@router.post(
    "/v1/webhooks",
    tags=["webhooks"],
    summary="Subscribe an endpoint to events",
    status_code=201,
    response_model=WebhookWithSecret,
    responses=documented_errors(400, 401, 403, 429, 500),
    dependencies=[needs(WEBHOOKS_WRITE)],
)
async def add_webhook(
    request: Request, body: WebhookCreate, session: TenantSession, caller: Caller
) -> JSONResponse:
    """Deliveries are signed Standard Webhooks (`webhook-id`, `webhook-timestamp`,
    `webhook-signature`); the signing secret (`whsec_…`) is in this answer only."""
    deps = deps_of(request)
    created = await webhooks.add(
        session,
        sealer_of(deps),
        caller.tenant_id,
        body,
        deps.settings.http_allow_hosts,
        deps.settings.quota_limits,
    )
    return JSONResponse(created.model_dump(mode="json"), status_code=201)


@router.get(
    "/v1/webhooks",
    tags=["webhooks"],
    summary="The tenant's webhook subscriptions",
    response_model=WebhookList,
    responses=documented_errors(400, 401, 500),
)
async def list_webhooks(
    session: TenantSession, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> WebhookList:
    """Oldest first, in pages."""
    after = pages.after(cursor, (datetime, str))
    rows = await webhooks.list_webhooks(session, caller.tenant_id, after, limit + 1)
    return WebhookList(**pages.cut(rows, limit, by_creation))


@router.delete(
    "/v1/webhooks/{webhook_id}",
    tags=["webhooks"],
    summary="Remove a subscription",
    status_code=204,
    responses=documented_errors(401, 403, 404, 500),
    dependencies=[needs(WEBHOOKS_WRITE)],
)
async def remove_webhook(webhook_id: str, session: TenantSession, caller: Caller) -> Response:
    """No more deliveries; what it was still to receive is dropped."""
    await webhooks.remove(session, caller.tenant_id, webhook_id)
    return Response(status_code=204)


@router.post(
    "/v1/webhooks/{webhook_id}/rotate-secret",
    tags=["webhooks"],
    summary="A new signing secret; the old one signs beside it for 24 h",
    response_model=WebhookWithSecret,
    responses=documented_errors(401, 403, 404, 500),
    dependencies=[needs(WEBHOOKS_WRITE)],
)
async def rotate_secret(
    request: Request, webhook_id: str, session: TenantSession, caller: Caller
) -> WebhookWithSecret:
    """Deliveries carry a signature by each secret until `previous_secret_expires_at`, so
    the receiver can switch at any time within the day."""
    sealer = sealer_of(deps_of(request))
    return await webhooks.rotate(session, sealer, caller.tenant_id, webhook_id)


@router.get(
    "/v1/webhooks/{webhook_id}/deliveries",
    tags=["webhooks"],
    summary="A subscription's delivery attempts, newest first",
    response_model=DeliveryList,
    responses=documented_errors(400, 401, 404, 500),
)
async def list_deliveries(
    webhook_id: str,
    session: TenantSession,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Cursor = None,
) -> DeliveryList:
    """Time, HTTP status, latency and error of each attempt, to debug an endpoint."""
    after = pages.after(cursor, (datetime, str))
    rows = await webhooks.deliveries(session, caller.tenant_id, webhook_id, limit + 1, after)
    return DeliveryList(**pages.cut(rows, limit, lambda d: (d.attempted_at, d.id)))
