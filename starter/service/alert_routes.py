"""A tenant's own operations-alert route: set, show and clear where its alerts (its dead
letters, its ``outcome_unknown`` executions, its connections needing re-auth) are sent, for
the gateway and the CLI. Set, it is used instead of the deployment's route.

Least privilege, as the approvals channel: the alerts run in the tenant with the authority
of the key that set the route, its id and scopes as they were then, never more; so that key
must itself be able to execute ``slack.post_message`` or ``webhook.post`` through the named
connection. A revoked key sends nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.alerts import SLACK_CAPABILITY, WEBHOOK_CAPABILITY, AlertRoute, AlertRouteSet
from schemas.approvals import key_actor
from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from schemas.scopes import capability_scopes, missing_scopes
from starter.service import connections
from starter.service.errors import MoatError
from store import alert_routes
from store import connections as stored_connections
from store.api_keys import AuthenticatedTenant
from store.models import AlertRouteRow


def _shown(row: AlertRouteRow) -> AlertRoute:
    return AlertRoute(
        connection_id=row.connection_id,
        target=row.target,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def not_set() -> MoatError:
    return MoatError(
        ErrorCode.NOT_FOUND,
        "This tenant has no alert route of its own (its alerts go to the deployment's, if "
        "any); `moat alerts route set` sets one.",
    )


async def set_route(
    session: AsyncSession,
    catalog: CapabilityCatalog,
    caller: AuthenticatedTenant,
    body: AlertRouteSet,
) -> AlertRoute:
    """Set (or replace) the route; the caller's key becomes the alerts' authority."""
    row = await stored_connections.get_connection(session, caller.tenant_id, body.connection_id)
    slack = row is not None and row.type == "slack"
    capability_id = SLACK_CAPABILITY if slack else WEBHOOK_CAPABILITY
    spec = catalog.get(capability_id)
    if spec is None:
        raise MoatError(
            ErrorCode.CAPABILITY_NOT_FOUND, f"This gateway does not offer {capability_id}."
        )
    missing = missing_scopes(caller.scopes, capability_scopes(spec.id, spec.required_scopes))
    if missing:
        raise MoatError(
            ErrorCode.SCOPE_MISSING,
            "The alerts run with this key's authority, and it cannot execute "
            f"{spec.id}: it lacks {', '.join(missing)}.",
            {"missing_scopes": missing},
        )
    await connections.admit(session, caller.tenant_id, spec, body.connection_id)
    saved = await alert_routes.put(
        session,
        tenant_id=caller.tenant_id,
        connection_id=body.connection_id,
        target=body.target,
        api_key_id=caller.key_id,
        scopes=caller.scopes,
        created_by=key_actor(caller.key_id),
        now=datetime.now(UTC),
    )
    return _shown(saved)


async def show(session: AsyncSession, tenant_id: str) -> AlertRoute:
    row = await alert_routes.get(session, tenant_id)
    if row is None:
        raise not_set()
    return _shown(row)


async def clear(session: AsyncSession, tenant_id: str) -> None:
    if not await alert_routes.clear(session, tenant_id):
        raise not_set()
