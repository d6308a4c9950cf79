"""Connections for the gateway and the CLI alike: add, list, show, rotate, revoke, and
re-encrypt under the newest key. A secret goes in and never comes out: every answer is a
``ConnectionInfo`` (fingerprint and at most the last 4 characters).

Every function takes the caller's session, scoped to the tenant; the caller owns the
transaction."""

from __future__ import annotations

from datetime import datetime

from pydantic_core import PydanticCustomError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas import oauth
from schemas.capabilities import CapabilitySpec
from schemas.connections import ConnectionCreate, ConnectionInfo, check_secret
from schemas.errors import ErrorCode
from schemas.pages import Key
from schemas.quotas import Quota, QuotaLimits
from schemas.redaction import redact
from starter.service import quotas
from starter.service.errors import MoatError
from store import connections
from store.keyrings.connections import ConnectionCipher
from store.models import ConnectionRow


def not_found(connection_id: str) -> MoatError:
    return MoatError(
        ErrorCode.CONNECTION_NOT_FOUND,
        f"No connection {connection_id[:80]!r}; `moat connection list` shows the tenant's.",
        {"connection_id": connection_id[:80]},
    )


def revoked(row: ConnectionRow) -> MoatError:
    assert row.revoked_at is not None
    return MoatError(
        ErrorCode.CONNECTION_REVOKED,
        f"Connection {row.id} was revoked at {row.revoked_at.isoformat()}; a revocation is "
        "final: add a new connection.",
        {"connection_id": row.id},
    )


async def add(
    session: AsyncSession,
    cipher: ConnectionCipher,
    tenant_id: str,
    body: ConnectionCreate,
    limits: QuotaLimits | None = None,
) -> ConnectionInfo:
    if redact(body.config) != body.config:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "config holds what looks like a secret (a key such as token, secret or password, "
            "or a credential-shaped value): config is shown to everyone who lists "
            "connections; put the credential in `secret`.",
        )
    await quotas.guard(session, limits, tenant_id, Quota.CONNECTIONS)
    row = await connections.create_connection(
        session,
        cipher,
        tenant_id=tenant_id,
        type=body.type,
        name=body.name,
        secret=body.secret,
        config=body.config,
    )
    return connections.to_info(row)


async def list_all(
    session: AsyncSession, tenant_id: str, after: Key | None = None, limit: int | None = None
) -> list[ConnectionInfo]:
    rows = await connections.list_connections(session, tenant_id, after, limit)
    return [connections.to_info(r) for r in rows]


async def _row(session: AsyncSession, tenant_id: str, connection_id: str) -> ConnectionRow:
    row = await connections.get_connection(session, tenant_id, connection_id)
    if row is None:
        raise not_found(connection_id)
    return row


async def show(
    session: AsyncSession, tenant_id: str, connection_id: str, *, revoked_too: bool = True
) -> ConnectionInfo:
    """One connection. ``revoked_too=False`` (the API's single reads): a revoked connection
    is gone, ``410 connection_gone``; what a ``DELETE`` revoked is not read back as if it
    were there (the list still shows it, for the record)."""
    row = await _row(session, tenant_id, connection_id)
    if row.revoked_at is not None and not revoked_too:
        raise MoatError(
            ErrorCode.CONNECTION_GONE,
            f"Connection {row.id} was revoked at {row.revoked_at.isoformat()}; it is kept "
            "for the record (the list of connections shows it) and can no longer be used.",
            {"connection_id": row.id, "revoked_at": row.revoked_at.isoformat()},
        )
    return connections.to_info(row)


async def rotate(
    session: AsyncSession,
    cipher: ConnectionCipher,
    tenant_id: str,
    connection_id: str,
    secret: str,
    now: datetime,
) -> ConnectionInfo:
    """Replace the secret; runs use the new one from their next attempt on. A GitHub App
    connection's new secret is the App's new private key, checked like the first."""
    row = await _row(session, tenant_id, connection_id)
    if row.revoked_at is not None:
        raise revoked(row)
    try:
        check_secret(row.type, row.config, secret)
    except PydanticCustomError as err:
        raise MoatError(ErrorCode.SCHEMA_VALIDATION_FAILED, f"secret: {err.message()}") from None
    return connections.to_info(
        await connections.rotate_connection(session, cipher, row, secret, now)
    )


async def revoke(
    session: AsyncSession, tenant_id: str, connection_id: str, now: datetime
) -> ConnectionInfo:
    """Revoke at ``now`` (revoking twice keeps the first time); kept for the record."""
    row = await _row(session, tenant_id, connection_id)
    return connections.to_info(await connections.revoke_connection(session, row, now))


async def reencrypt(session: AsyncSession, cipher: ConnectionCipher, tenant_id: str) -> int:
    """Re-seal the tenant's live connections under the active key; how many were."""
    return await connections.reencrypt_connections(session, cipher, tenant_id)


async def admit(
    session: AsyncSession, tenant_id: str, spec: CapabilitySpec, connection_id: str | None
) -> ConnectionRow | None:
    """The connection a call names (None: it names none, and the capability can do
    without: else ``connection_required``) must be the tenant's (another tenant's is as
    absent: ``connection_not_found``) and of a type the capability takes
    (``connection_type_mismatch``). A revoked one passes here, so that a stored answer can
    still be replayed: ``refuse_revoked`` refuses it for a new execution."""
    if connection_id is None:
        admit_none(spec)
        return None
    row = await connections.get_connection(session, tenant_id, connection_id)
    if row is None:
        raise MoatError(
            ErrorCode.CONNECTION_NOT_FOUND,
            f"No connection {connection_id[:80]!r}: `GET /v1/connections` lists yours.",
            {"connection_id": connection_id[:80]},
        )
    accepted = list(spec.connection_types)
    if row.type not in accepted and oauth.stands_for(row.type, row.config) not in accepted:
        takes = f"takes {', '.join(accepted)} connections" if accepted else "takes none"
        raise MoatError(
            ErrorCode.CONNECTION_TYPE_MISMATCH,
            f"{spec.id} {takes}; connection {row.id} is {row.type}.",
            {"connection_type": row.type, "accepted_types": accepted},
        )
    return row


def admit_none(spec: CapabilitySpec) -> None:
    """``admit`` for a call that names no connection: ``spec`` must do without one."""
    if spec.connection_required:
        raise required(spec)


def required(spec: CapabilitySpec) -> MoatError:
    """The refusal of a call to ``spec`` that names no connection, saying which types fit
    and how to add one."""
    accepted = list(spec.connection_types)
    kind = accepted[0] if accepted else "TYPE"
    return MoatError(
        ErrorCode.CONNECTION_REQUIRED,
        f"{spec.id} needs a connection of type {' or '.join(accepted) or 'none known'}: add "
        f"one (`POST /v1/connections` with type {kind!r}, or `moat connection add TENANT "
        f"--type {kind} --name NAME`) and name its id in the request's connection_id.",
        {"capability_id": spec.id, "accepted_types": accepted},
    )


def refuse_revoked(row: ConnectionRow | None) -> None:
    """A new execution may not name a revoked connection (``connection_revoked``): refused
    before anything is claimed, as the run's adapter step refuses it too."""
    if row is not None and row.revoked_at is not None:
        raise revoked(row)
