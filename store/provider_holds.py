"""Provider holds: until when a tenant's connection must not call its provider again (the
provider answered ``429``/``503`` with ``Retry-After``). Times are the database's clock, so
workers whose clocks differ agree on them."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_HELD_FOR = text(
    "SELECT extract(epoch FROM held_until - clock_timestamp()) FROM provider_holds "
    "WHERE tenant_id = :tenant AND connection_id = :connection AND held_until > clock_timestamp()"
)
_HOLD = text(
    "INSERT INTO provider_holds AS h (tenant_id, connection_id, held_until) "
    "VALUES (:tenant, :connection, clock_timestamp() + make_interval(secs => :seconds)) "
    "ON CONFLICT (tenant_id, connection_id) DO UPDATE "
    "SET held_until = greatest(h.held_until, excluded.held_until)"
)


async def held_for(session: AsyncSession, tenant_id: str, connection_id: str) -> float:
    """Seconds the connection is still held (0: free). The caller has named the tenant."""
    seconds = await session.scalar(_HELD_FOR, {"tenant": tenant_id, "connection": connection_id})
    return max(0.0, float(seconds)) if seconds is not None else 0.0


async def hold(session: AsyncSession, tenant_id: str, connection_id: str, seconds: float) -> None:
    """Hold the connection ``seconds`` from now, unless it is held longer already."""
    await session.execute(
        _HOLD, {"tenant": tenant_id, "connection": connection_id, "seconds": seconds}
    )
