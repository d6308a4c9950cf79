"""Manifest retention: remove manifests past their retention (``schemas.retention``), recording each
removal as a ``MANIFEST_EXPIRED`` event; and delete the kept outputs whose idempotency window
has closed. Compliance tenants' manifests stay 7 years; the database itself refuses their
earlier deletion."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.evidence import continue_chain
from schemas.events import AggregateType, EventType
from schemas.names import EXPIRE_MANIFESTS
from schemas.retention import (
    IDEMPOTENCY_WINDOW_MINIMUM,
    RetentionInput,
    RetentionReport,
    retention_for,
)
from store import manifests, outputs, tenancy, tenants
from store.manifests import ManifestStore


class RetentionActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], store: ManifestStore) -> None:
        self._sessions = sessions
        self._store = store

    @activity.defn(name=EXPIRE_MANIFESTS)
    async def expire_manifests(self, inp: RetentionInput) -> RetentionReport:
        assert inp.as_of is not None
        report = RetentionReport(as_of=inp.as_of)
        # Kept outputs of every tenant, manifest folder or not (a run whose manifest could
        # not be written still kept its output).
        async with self._sessions.begin() as session:
            everyone = [t.id for t in await tenants.list_tenants(session)]
        for tenant_id in everyone:
            activity.heartbeat(tenant_id)
            report.outputs_deleted += await self._expire_outputs(tenant_id, inp.as_of)
        # Manifests: tenants are found from the store's folders.
        for tenant_id in await asyncio.to_thread(self._store.tenants):
            report.tenants += 1
            while True:
                activity.heartbeat(tenant_id)
                deleted, kept, refused = await self._expire_batch(
                    tenant_id, inp.as_of, inp.batch_size
                )
                report.deleted += deleted
                report.kept += kept
                report.refused += refused
                if deleted < inp.batch_size:
                    break
        return report

    async def _expire_outputs(self, tenant_id: str, as_of: datetime) -> int:
        """Delete the tenant's kept outputs whose idempotency window has closed: past it a
        repeat is a new execution, so nothing would ever serve them again."""
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, tenant_id)
            return await outputs.delete_expired(session, tenant_id, as_of)

    async def _expire_batch(
        self, tenant_id: str, as_of: datetime, limit: int
    ) -> tuple[int, int, int]:
        """Deleted, kept and refused manifests of one batch."""
        async with self._sessions.begin() as session:
            await tenancy.set_tenant(session, tenant_id)
            tenant = await tenants.get_tenant(session, tenant_id)
            if tenant is None:
                return 0, 0, 0
            compliance = tenant.retention_mode == "compliance"
            # The shortest any manifest is kept; rows younger than that are not looked at.
            horizon = as_of - IDEMPOTENCY_WINDOW_MINIMUM
            rows = await manifests.older_than(session, tenant_id, horizon, limit)
            expired = [
                r
                for r in rows
                if r.created_at
                + retention_for(
                    r.outcome,
                    compliance=compliance,
                    idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
                )
                <= as_of
            ]
            refused = 0
            for row in expired:
                try:
                    async with session.begin_nested():
                        await manifests.unindex(session, row.id)
                except IntegrityError:
                    refused += 1  # compliance: the database keeps it 7 years, whatever we ask
                    continue
                await asyncio.to_thread(self._store.delete, tenant_id, row.run_id)
                chain = continue_chain(tenant_id, row.receipt_id, row.run_id, "moat.retention")
                chain.add(
                    EventType.MANIFEST_EXPIRED,
                    AggregateType.MANIFEST,
                    row.id,
                    sha256=row.sha256,
                    outcome=row.outcome,
                    age_days=round((as_of - row.created_at) / timedelta(days=1), 2),
                    retention_mode=tenant.retention_mode,
                )
                await chain.append(session)
        return len(expired) - refused, len(rows) - len(expired), refused
