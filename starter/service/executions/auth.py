"""Who calls: the presented API key verified before any work on the request's body.

Verified moments ago (``keycache``), by a lookup of the same key already under way on this
process (a burst of one new key costs one lookup), or by the call's own lookup, in the
transaction that then looks for the stored answer (no round trip more). A stored answer
may be replayed on a key verified moments ago, from memory or from Postgres; every call
that starts or resumes a run authenticates in Postgres again, in the statement that found
no stored receipt for its key or in its own transaction.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from starter.service.errors import MoatError
from starter.service.executions.keycache import UNKNOWN, KeyCache, Unknown
from starter.service.tenants import unknown_key
from store import api_keys
from store.api_keys import AuthenticatedTenant


def unauthenticated(message: str) -> MoatError:
    return MoatError(ErrorCode.UNAUTHENTICATED, message)


async def recently_verified(keys: KeyCache, presented: str | None) -> AuthenticatedTenant | None:
    """The key's tenant if verified moments ago, or by a lookup of it under way (waited
    for); ``unauthenticated`` for no key or one that lookup refused. None: the call looks
    the key up itself (``looked_up``)."""
    if presented is None:
        raise unauthenticated("Send 'Authorization: Bearer <api key>'.")
    known = keys.get(presented)
    if known is not None:
        return known
    pending = keys.pending(presented)
    found = await pending if pending is not None else UNKNOWN
    if found is None:
        raise unknown_key(presented)
    return None if found is UNKNOWN else found


async def looked_up(keys: KeyCache, session: AsyncSession, presented: str) -> AuthenticatedTenant:
    """The key's tenant, by this call's lookup in its transaction (scoped to the tenant
    from here on); the calls of the same key arriving meanwhile wait for it."""
    lookup = keys.looking_up(presented)
    outcome: AuthenticatedTenant | Unknown | None = UNKNOWN
    try:
        tenant = await authenticate(session, presented)
        outcome = tenant
        return tenant
    except MoatError as err:
        if err.code == "unauthenticated":
            outcome = None
        raise
    finally:
        keys.looked_up(lookup, outcome)


async def authenticate(session: AsyncSession, presented: str) -> AuthenticatedTenant:
    """The key's tenant, by Postgres; the session's transaction is scoped to it from here
    on (row-level security)."""
    # The lookup names the tenant too, in the same round trip.
    tenant = await api_keys.authenticate(session, presented, scope=True)
    if tenant is None:
        raise unknown_key(presented)
    return tenant
