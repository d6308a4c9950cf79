"""A tenant's own operations-alert route (``/v1/alerts/route``): where its dead letters,
``outcome_unknown`` executions and connections needing re-auth are announced, instead of
the deployment's route.

Setting or clearing it needs ``policy:write``, as the approvals channel: it decides whose
authority the alerts run with and where the tenant's events are told; the key setting it
must also be able to execute ``slack.post_message`` or ``webhook.post`` itself, through the
named connection. Reading it needs any key of the tenant, as its dead letters: it shows a
connection id and a target, never a secret.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from schemas.alerts import AlertRoute, AlertRouteSet
from schemas.scopes import POLICY_WRITE
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of
from starter.gateway.errors import documented_errors
from starter.service import alert_routes

router = APIRouter(tags=["alerts"])


@router.put(
    "/v1/alerts/route",
    summary="Send this tenant's operations alerts to its own channel",
    response_model=AlertRoute,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[
        needs(POLICY_WRITE, also="the scopes to execute slack.post_message or webhook.post")
    ],
)
async def set_route(
    request: Request, body: AlertRouteSet, session: TenantSession, caller: Caller
) -> AlertRoute:
    """The tenant's alerts are sent through the `slack` or `webhook` connection
    `connection_id` to `target` (a Slack channel's id, or the endpoint's URL), as executions
    in this tenant with this key's id and scopes; revoking the key stops them."""
    return await alert_routes.set_route(session, deps_of(request).catalog, caller, body)


@router.get(
    "/v1/alerts/route",
    summary="The tenant's own alert route",
    response_model=AlertRoute,
    responses=documented_errors(401, 404, 500),
)
async def show_route(session: TenantSession, caller: Caller) -> AlertRoute:
    return await alert_routes.show(session, caller.tenant_id)


@router.delete(
    "/v1/alerts/route",
    summary="Send this tenant's alerts to the deployment's route again",
    status_code=204,
    responses=documented_errors(401, 403, 404, 500),
    dependencies=[needs(POLICY_WRITE)],
)
async def clear_route(session: TenantSession, caller: Caller) -> Response:
    await alert_routes.clear(session, caller.tenant_id)
    return Response(status_code=204)
