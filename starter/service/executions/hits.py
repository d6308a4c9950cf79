"""Hits: idempotent hits counted without a write per hit.

A replay writes nothing on its way (a write there would be on the hottest path, and one
any tenant could multiply by repeating a request): the gateway counts hits in memory, per
execution, and adds them to one counter row per execution (``store.hits``) every
``MOAT_HIT_FLUSH_SECONDS``, in one transaction.

Loss window: the hits counted since the last flush (at most ``MOAT_HIT_FLUSH_SECONDS`` of
them) are lost if the gateway dies without shutting down (``kill -9``, out of memory); a
clean shutdown flushes them. A flush that fails (Postgres away) keeps its counts for the
next one. The counters are telemetry: the replay itself, its receipt and its output never
depend on them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import hits, tenancy

log = logging.getLogger("moat.gateway.hits")

# Distinct executions held between two flushes; past it, new ones are counted as dropped
# rather than let a flood of distinct keys grow the gateway's memory while Postgres is away.
MAX_PENDING = 100_000


class HitLedger:
    """The gateway's hit counters since the last flush."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], max_pending: int = MAX_PENDING
    ) -> None:
        self._sessions = sessions
        self._max_pending = max_pending
        self._pending: dict[tuple[str, str], hits.Hits] = {}
        self.dropped = 0

    def note(
        self, tenant_id: str, receipt_id: str, capability_id: str, key: str, at: datetime
    ) -> None:
        """Count one replay (no I/O)."""
        self._add(hits.Hits(tenant_id, receipt_id, capability_id, key, 1, at, at))

    def _add(self, new: hits.Hits) -> None:
        held = self._pending.get((new.tenant_id, new.receipt_id))
        if held is None:
            if len(self._pending) >= self._max_pending:
                self.dropped += new.hits
                return
            self._pending[(new.tenant_id, new.receipt_id)] = new
            return
        held.hits += new.hits
        held.first_hit_at = min(held.first_hit_at, new.first_hit_at)
        held.last_hit_at = max(held.last_hit_at, new.last_hit_at)

    @property
    def pending(self) -> int:
        """Hits counted and not yet flushed."""
        return sum(h.hits for h in self._pending.values())

    async def flush(self) -> int:
        """Add the counted hits to their rows, one transaction for all; returns how many.
        On failure the counts are kept for the next flush and the error raised."""
        batch, self._pending = self._pending, {}
        if not batch:
            return 0
        by_tenant: dict[str, list[hits.Hits]] = defaultdict(list)
        for h in batch.values():
            by_tenant[h.tenant_id].append(h)
        try:
            async with self._sessions.begin() as session:
                for tenant_id, rows in by_tenant.items():
                    await tenancy.set_tenant(session, tenant_id)
                    await hits.add_hits(session, rows)
        except BaseException:
            for h in batch.values():
                self._add(h)
            raise
        return sum(h.hits for h in batch.values())

    async def run(self, every: float) -> None:
        """Flush every ``every`` seconds until cancelled; a failed flush is logged and
        retried at the next tick."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.flush()
            except Exception as err:  # the counts stay for the next tick
                log.warning(
                    "could not record %d idempotent hits yet (%s); retrying in %gs",
                    self.pending,
                    type(err).__name__,
                    every,
                )
