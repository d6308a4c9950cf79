"""The transparency log's checkpoint job: every tenant's waiting leaves sequenced and a
checkpoint signed for each log that grew, one tenant at a time (its own transactions, under
row-level security). The log key is read at each run, so a replaced key file is used."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from schemas.checkpoints import LogCheckpointInput, LogCheckpointReport
from schemas.names import LOG_CHECKPOINT
from schemas.settings import MoatSettings
from store import tenants, translog
from store.keyrings import log as log_key


class LogActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], settings: MoatSettings) -> None:
        self._sessions = sessions
        self._settings = settings

    @activity.defn(name=LOG_CHECKPOINT)
    async def log_checkpoint(self, inp: LogCheckpointInput) -> LogCheckpointReport:
        key = await asyncio.to_thread(log_key.signing_key, self._settings)
        if inp.tenant_id is not None:
            everyone = [inp.tenant_id]
        else:
            async with self._sessions.begin() as session:
                everyone = await tenants.tenant_ids(session)
        report = LogCheckpointReport(tenants=len(everyone))
        for tenant_id in everyone:
            activity.heartbeat(tenant_id)
            origin = log_key.origin(self._settings, tenant_id)
            count, signed = await translog.checkpoint_tenant(self._sessions, tenant_id, origin, key)
            report.sequenced += count
            report.checkpoints += signed is not None
        return report
