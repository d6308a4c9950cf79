"""The console's webhooks page: the tenant's subscriptions as ``GET /v1/webhooks`` lists
them. A signing secret is shown by the API once, when it is made or rotated, and never
here."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from starter.gateway.access import needs
from starter.gateway.console.auth import ConsoleSession, SignedIn
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.render import page
from starter.service import webhooks

router = APIRouter(prefix="/console/webhooks")
NAV = NavEntry("Webhooks", "/console/webhooks", order=50)
LISTED = 200


@router.get("", dependencies=[needs(also="a console session")])
async def list_page(request: Request, principal: SignedIn, session: ConsoleSession) -> Response:
    rows = await webhooks.list_webhooks(session, principal.tenant_id, None, LISTED + 1)
    return page(
        request,
        "webhooks.html",
        principal,
        title="Webhooks",
        subscriptions=rows[:LISTED],
        more=len(rows) > LISTED,
    )
