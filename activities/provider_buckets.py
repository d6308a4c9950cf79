"""Provider buckets: a provider's ``Retry-After`` holds back every call on the same tenant's
connection, on every worker, and nobody else's.

When a provider answers ``429`` or ``503`` with ``Retry-After`` through a tenant's
connection, the hold is written to Postgres (``store.provider_holds``, keyed by tenant and
connection); before each call through a connection, the worker reads it. A call that finds
the connection held waits out the rest inside its attempt when that fits the attempt's
slack (``IN_ATTEMPT_WAIT``), else fails retryably without calling, as
``provider_rate_limited`` with the time left as its next retry delay. The retried call
itself honours ``Retry-After`` too (``adapters.fail``). Another tenant's
connection to the same provider has its own row, so its calls are never held back, and
calls without a connection are not held (they carry no shared credential to protect).

Wraps the adapters (``worker.py``), so it sits in the attempt's accounting like any
adapter failure. A database fault here fails open (logged): the provider will say so again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities.adapters import Adapter, fail
from schemas.connections import Credential
from schemas.records import ErrorTaxonomy
from schemas.run import ADAPTER_TIMEOUT_SLACK, AdapterInput, AdapterOutput
from store import provider_holds, tenancy

log = logging.getLogger("moat.provider_buckets")

# The statuses whose Retry-After holds the connection back.
HOLDING_STATUSES = frozenset({429, 503})
# The longest wait inside an attempt: its deadline is the capability's timeout plus
# ADAPTER_TIMEOUT_SLACK, so this much still leaves the call its whole timeout.
IN_ATTEMPT_WAIT = ADAPTER_TIMEOUT_SLACK - timedelta(seconds=1)


class ProviderBuckets:
    """Built once in ``worker.py``; ``guard`` wraps each adapter."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        in_attempt_wait: timedelta = IN_ATTEMPT_WAIT,
    ) -> None:
        self._sessions = sessions
        self._in_attempt_wait = in_attempt_wait.total_seconds()

    def guard(self, adapter: Adapter) -> Adapter:
        """``adapter``, held back while its tenant's connection is held, holding it when
        the provider says so."""

        async def guarded(inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
            if inp.ref.connection_id is None:
                return await adapter(inp, credential)
            await self._wait_turn(inp.ref.tenant_id, inp.ref.connection_id)
            try:
                return await adapter(inp, credential)
            except ApplicationError as err:
                await self._hold_after(inp.ref.tenant_id, inp.ref.connection_id, err)
                raise

        return guarded

    async def _wait_turn(self, tenant_id: str, connection_id: str) -> None:
        try:
            async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
                held = await provider_holds.held_for(session, tenant_id, connection_id)
        except Exception:
            log.warning("provider hold of %s not read; calling", connection_id, exc_info=True)
            return
        if held <= 0:
            return
        if held <= self._in_attempt_wait:
            await asyncio.sleep(held)
            return
        raise fail(
            ErrorTaxonomy.PROVIDER_RATE_LIMITED,
            f"the provider asked this connection to wait (Retry-After); not called, "
            f"retried in {held:.1f} s",
            retry_after=timedelta(seconds=held),
        )

    async def _hold_after(self, tenant_id: str, connection_id: str, err: ApplicationError) -> None:
        details = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
        if err.next_retry_delay is None or details.get("http_status") not in HOLDING_STATUSES:
            return
        seconds = err.next_retry_delay.total_seconds()
        if seconds <= 0:
            return
        try:
            async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
                await provider_holds.hold(session, tenant_id, connection_id, seconds)
        except Exception:
            log.warning("provider hold of %s not written", connection_id, exc_info=True)
