"""The trust rollup's refresh: every tenant's new outcome events summed into its minute
buckets, one transaction per tenant (row-level security holds throughout)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from schemas.names import REFRESH_TRUST
from schemas.probes import TrustRefreshInput, TrustRefreshReport
from store import tenancy, tenants, trust


class TrustActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @activity.defn(name=REFRESH_TRUST)
    async def refresh_trust(self, inp: TrustRefreshInput) -> TrustRefreshReport:
        if inp.tenant_id is not None:
            everyone = [inp.tenant_id]
        else:
            async with self._sessions.begin() as session:
                everyone = await tenants.tenant_ids(session)
        for tenant_id in everyone:
            activity.heartbeat(tenant_id)
            async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
                await trust.refresh(session, tenant_id)
        return TrustRefreshReport(tenants=len(everyone))
