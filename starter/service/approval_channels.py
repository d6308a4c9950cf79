"""A tenant's approvals channel: set, show and clear where its new approvals are posted
in Slack, for the gateway and the CLI.

Least privilege: the announcements (a ``slack.post_message`` per approval, a
``slack.update_message`` per decision) run with the authority of the key that set the
channel, its id and scopes as they were then, never more; so that key must itself be able
to execute both, through the named Slack connection. The signing secret is sealed at rest
and never shown again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.approvals import key_actor
from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from schemas.scopes import capability_scopes, missing_scopes
from schemas.slack_approvals import (
    POST_CAPABILITY,
    UPDATE_CAPABILITY,
    ApprovalChannel,
    ApprovalChannelSet,
    interactivity_path,
)
from starter.service import connections
from starter.service.errors import MoatError
from store import approval_channels
from store.api_keys import AuthenticatedTenant
from store.keyrings.codec import OutputSealer
from store.models import ApprovalChannelRow


def _shown(row: ApprovalChannelRow) -> ApprovalChannel:
    return ApprovalChannel(
        kind=row.kind,
        connection_id=row.connection_id,
        channel=row.channel,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        interactivity_path=interactivity_path(row.tenant_id),
    )


def not_set() -> MoatError:
    return MoatError(
        ErrorCode.NOT_FOUND,
        "This tenant has no approvals channel; `moat approvals channel set` sets one.",
    )


async def set_channel(
    session: AsyncSession,
    sealer: OutputSealer,
    catalog: CapabilityCatalog,
    caller: AuthenticatedTenant,
    body: ApprovalChannelSet,
) -> ApprovalChannel:
    """Set (or replace) the channel; the caller's key becomes the announcements' authority."""
    for capability_id in (POST_CAPABILITY, UPDATE_CAPABILITY):
        spec = catalog.get(capability_id)
        if spec is None:
            raise MoatError(
                ErrorCode.CAPABILITY_NOT_FOUND, f"This gateway does not offer {capability_id}."
            )
        needed = capability_scopes(spec.id, spec.required_scopes)
        missing = missing_scopes(caller.scopes, needed)
        if missing:
            raise MoatError(
                ErrorCode.SCOPE_MISSING,
                "The announcements run with this key's authority, and it cannot execute "
                f"{spec.id}: it lacks {', '.join(missing)}.",
                {"missing_scopes": missing},
            )
        await connections.admit(session, caller.tenant_id, spec, body.connection_id)
    row = await approval_channels.put(
        session,
        sealer,
        tenant_id=caller.tenant_id,
        connection_id=body.connection_id,
        channel=body.channel,
        signing_secret=body.signing_secret,
        api_key_id=caller.key_id,
        scopes=caller.scopes,
        created_by=key_actor(caller.key_id),
        now=datetime.now(UTC),
    )
    return _shown(row)


async def show(session: AsyncSession, tenant_id: str) -> ApprovalChannel:
    row = await approval_channels.get(session, tenant_id)
    if row is None:
        raise not_set()
    return _shown(row)


async def clear(session: AsyncSession, tenant_id: str) -> None:
    if not await approval_channels.clear(session, tenant_id):
        raise not_set()
