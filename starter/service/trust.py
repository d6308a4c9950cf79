"""Trust scores: how reliable each capability version has been over a window, for one
tenant (its own traffic) or the whole platform (the admin), read from the rollup."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.capabilities import CapabilityCatalog
from schemas.trust import TrustReport, TrustSlice, TrustWindow, report
from starter.runtime.database import every_tenant
from starter.service.errors import capability_not_found
from store import trust


def check_capability(catalog: CapabilityCatalog, capability_id: str) -> None:
    if catalog.get(capability_id) is None:
        raise capability_not_found(
            catalog, capability_id, then="`GET /v1/capabilities` lists them."
        )


async def tenant_report(
    session: AsyncSession,
    tenant_id: str,
    window: TrustWindow,
    as_of: datetime,
    min_samples: int,
    capability_id: str | None = None,
) -> TrustReport:
    """The tenant's scores; its transaction is scoped to it."""
    bounds = window.bounds(as_of)
    before = (bounds[0] - window.length, bounds[0])
    span = window.span_minutes
    current = await trust.rollup_counts(session, tenant_id, *bounds, capability_id, span)
    previous = await trust.rollup_counts(session, tenant_id, *before, capability_id, span)
    mark = await trust.refreshed_at(session, tenant_id)
    return report(window, bounds, current, previous, min_samples, mark)


async def platform_report(
    sessions: async_sessionmaker[AsyncSession],
    window: TrustWindow,
    as_of: datetime,
    min_samples: int,
    capability_id: str | None = None,
) -> TrustReport:
    """Every tenant's traffic together (each tenant read in its own scoped transaction)."""
    bounds = window.bounds(as_of)
    windows = [bounds, (bounds[0] - window.length, bounds[0])]
    read = partial(
        trust.windows_counts,
        windows=windows,
        capability_id=capability_id,
        span_minutes=window.span_minutes,
    )
    found = await every_tenant(sessions, read)
    (current, previous), mark = trust.platform_counts(found, len(windows))
    return report(window, bounds, current, previous, min_samples, mark)


# How many parts a window's trend line is cut into: each a whole number of the rollup
# buckets the window reads (5 minutes, an hour, a day, a day).
TREND_SLICES = {TrustWindow.H1: 12, TrustWindow.H24: 24, TrustWindow.D7: 7, TrustWindow.D30: 30}


async def tenant_series(
    session: AsyncSession, tenant_id: str, window: TrustWindow, as_of: datetime
) -> tuple[tuple[datetime, datetime], int, list[TrustSlice]]:
    """The tenant's window cut into equal parts (``TREND_SLICES``), each part's counted
    outcomes per capability version and kind of traffic: the window's bounds, the number
    of parts, and the parts that hold any."""
    bounds = window.bounds(as_of)
    slices = TREND_SLICES[window]
    parts = await trust.rollup_series(
        session, tenant_id, *bounds, slices, span_minutes=window.span_minutes
    )
    return bounds, slices, parts
