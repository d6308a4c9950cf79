"""Creating ``outcome_events`` partitions ahead of their months (``schemas.partitions``)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from schemas.names import ENSURE_PARTITIONS
from schemas.partitions import PartitionsInput, PartitionsReport
from store import receipts


class PartitionActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @activity.defn(name=ENSURE_PARTITIONS)
    async def ensure_partitions(self, inp: PartitionsInput) -> PartitionsReport:
        assert inp.as_of is not None
        # Idempotent: a month whose partition exists is left alone, so a retry or an
        # overlapping run changes nothing.
        async with self._sessions.begin() as session:
            await receipts.ensure_outcome_partitions(session, inp.as_of, inp.months)
        return PartitionsReport(as_of=inp.as_of, months=receipts.months_from(inp.as_of, inp.months))
