"""Resolving a run's connection at the moment of the adapter call: read and opened under the
tenant's row-level security, on every attempt, so a rotation applies from the next one."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from schemas.connections import ConnectionType, Credential
from schemas.records import ErrorTaxonomy
from store import connections, tenancy
from store.keys.connections import ConnectionCipher

CONNECTION_NOT_FOUND = "connection_not_found"
CONNECTION_REVOKED = "connection_revoked"


def refused(code: str, message: str, connection_id: str) -> ApplicationError:
    """A connection the run cannot use: the tenant's to fix, so never retried, and counted
    like a policy refusal rather than against the provider."""
    return ApplicationError(
        message,
        {
            "error_code": code,
            "taxonomy": ErrorTaxonomy.POLICY_DENIED.value,
            "connection_id": connection_id[:80],
        },
        type=code,
        non_retryable=True,
    )


class StoreConnectionResolver:
    """``schemas.connections.ConnectionResolver`` over the ``connections`` table."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], cipher: ConnectionCipher
    ) -> None:
        self._sessions = sessions
        self._cipher = cipher

    async def resolve(self, tenant_id: str, connection_id: str) -> Credential:
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            row = await connections.get_connection(session, tenant_id, connection_id)
        if row is None:
            raise refused(
                CONNECTION_NOT_FOUND,
                f"the tenant has no connection {connection_id[:80]!r}",
                connection_id,
            )
        if row.revoked_at is not None:
            raise refused(
                CONNECTION_REVOKED,
                f"connection {row.id} was revoked at {row.revoked_at.isoformat()}: "
                "add a new connection and use its id",
                connection_id,
            )
        return Credential(
            connection_id=row.id,
            type=ConnectionType(row.type),
            secret=connections.open_secret(self._cipher, row),
            config=dict(row.config),
            fingerprint=row.fingerprint,
        )
