"""The front door of the execute path: one request, from the key it presents to what it
comes to (``Executions.execute``), through the stages of this package in order:

auth (who calls) → ingest (the body made a request) → replay (from memory or Postgres) →
flights (identical copies share one way) → start (start or attach a run) → wait → results.

The caller (the gateway) turns the ``Outcome`` into its answer; nothing here speaks HTTP.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from schemas.capabilities import CapabilityCatalog
from schemas.execute import Envelope
from schemas.records import Receipt
from schemas.settings import MoatSettings
from starter.service.executions import auth, ingest, replay, results, start, status, wait
from starter.service.executions.call import Call, Outcome, Unfinished
from starter.service.executions.flights import Flights
from starter.service.executions.hits import HitLedger
from starter.service.executions.ingest import Prepared
from starter.service.executions.keycache import KeyCache
from starter.service.executions.memory import AnswerCache
from starter.service.ratelimit import RateLimits
from starter.service.tenants import unknown_key
from store import db, tenancy
from store.api_keys import AuthenticatedTenant
from store.held import HeldReads
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring


class Shared(Protocol):
    """What every call on one gateway shares, held by the gateway and read at each call:
    its sessions, the keys it verified moments ago, its flights and its rate limits."""

    sessions: async_sessionmaker[AsyncSession]
    keys: KeyCache
    flights: Flights
    rate_limits: RateLimits


class Executions:
    """Executing capabilities, for the gateway (built once, with its Temporal client)."""

    def __init__(
        self,
        settings: MoatSettings,
        client: Client,
        catalog: CapabilityCatalog,
        start_keys: StartKeyring,
        sessions: async_sessionmaker[AsyncSession],
        sealer: OutputSealer,
        hits: HitLedger | None = None,
        answers: AnswerCache | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self.catalog = catalog
        # Signs the runs' input, and approval decisions too (``service.approvals``).
        self.start_keys = start_keys
        self._sessions = sessions
        self.sealer = sealer
        self.hits = hits or HitLedger(sessions)
        self.answers = (
            answers if answers is not None else AnswerCache(max_bytes=settings.answer_cache_bytes)
        )
        # The hot path's reads of a verified key: one statement each, no session.
        engine = db.engine_of(sessions)
        held = settings.held_reads
        self.reads = HeldReads(engine, held) if engine is not None and held > 0 else None

    async def execute(self, call: Call, shared: Shared) -> Outcome:
        """Run the capability ``call`` asks for, or answer an earlier request's result for
        the same key. The rules it applies, in order:

        - A 401 before a 400: nothing is done with the body before the key is verified
          (``auth``: moments ago, by a lookup under way, or by this call's own lookup,
          which opens the transaction that then looks for the stored answer).
        - Memory answers only for a key verified moments ago (no transaction open): a
          finished execution's stored answer, counted as a hit (``replay.from_memory``).
        - Identical copies share one way through Postgres and Temporal (``flights``), by
          the key presented; a copy joining a flight holds no connection while it waits.
        - A copy answered with a stored receipt is an idempotent hit, like its leader."""
        tenant = await auth.recently_verified(shared.keys, call.presented_key)
        async with contextlib.AsyncExitStack() as own_transaction:
            session: AsyncSession | None = None
            if tenant is None:  # looked up in the transaction the stored answer is read in
                assert call.presented_key is not None
                session = await own_transaction.enter_async_context(shared.sessions.begin())
                tenant = await auth.looked_up(shared.keys, session, call.presented_key)
            prepared = await ingest.prepare_aside(call.body, call.idempotency_key, self.catalog)
            if session is None:  # verified moments ago: memory may answer
                remembered = replay.from_memory(self.answers, self.hits, tenant.tenant_id, prepared)
                if remembered is not None:
                    return remembered
            flight = _flight_of(call, prepared)
            if session is not None and shared.flights.flying(flight):
                await own_transaction.aclose()  # a copy waits for its flight with no connection
                session = None
            if session is None:
                work = functools.partial(self._through_postgres, call, shared, prepared)
            else:
                work = functools.partial(
                    self._in_transaction, call, shared, prepared, tenant, session, own_transaction
                )
            copied = self._count_copy_hits(prepared)
            return await shared.flights.share(flight, work, call.trace_id, copied, call.answer_copy)

    async def _through_postgres(self, call: Call, shared: Shared, prepared: Prepared) -> Outcome:
        """The way of a call with no transaction of its own open (its key verified moments
        ago, or a copy that went its own way). An ``answerable`` request of a key still
        verified (``keycache``) is read in one statement on a held connection, with no
        session (``replay.authenticated_from_postgres``): its stored answer, replayed as
        memory replays it, or what holds its key, with the key authenticated in Postgres by
        the same statement before its run is started or joined. Anything else (or with no
        held connection free) authenticates and reads in a transaction."""
        assert call.presented_key is not None
        known = shared.keys.get(call.presented_key)
        admitted = None
        reads = self._held(shared)
        if known is not None and reads is not None and replay.answerable(prepared):
            shared.rate_limits.admit(self._settings, known.tenant_id)
            admitted = known.tenant_id
            since = shared.keys.now()
            read = await replay.authenticated_from_postgres(
                reads,
                self.sealer,
                self.hits,
                self.answers,
                call.presented_key,
                known,
                prepared,
            )
            if read is not None:
                found, tenant = read
                if isinstance(found, Outcome):
                    return found
                if tenant is None:  # revoked since: trusted no longer
                    shared.keys.forget(known.key_id)
                    raise unknown_key(call.presented_key)
                shared.keys.keep(call.presented_key, tenant, since)
                ingest.admit_unconnected(prepared)
                return await self.run(tenant, prepared, call, found)
        async with shared.sessions.begin() as session:
            tenant = await auth.authenticate(session, call.presented_key)
            if tenant.tenant_id != admitted:
                shared.rate_limits.admit(self._settings, tenant.tenant_id)
            found = await self._stored(session, tenant.tenant_id, prepared, call.trace_id)
        return (
            found if isinstance(found, Outcome) else await self.run(tenant, prepared, call, found)
        )

    def _held(self, shared: Shared) -> HeldReads | None:
        """The held reads, when they are on the engine of the sessions the call is given."""
        reads = self.reads
        return (
            reads if reads is not None and db.engine_of(shared.sessions) is reads.engine else None
        )

    async def close(self) -> None:
        """Close the held connections (the gateway is stopping)."""
        if self.reads is not None:
            await self.reads.close()

    async def _in_transaction(
        self,
        call: Call,
        shared: Shared,
        prepared: Prepared,
        tenant: AuthenticatedTenant,
        session: AsyncSession,
        own_transaction: contextlib.AsyncExitStack,
    ) -> Outcome:
        """The way of a call that looked its key up itself, in the transaction it opened
        for it; that transaction ends before the run is waited for."""
        shared.rate_limits.admit(self._settings, tenant.tenant_id)
        found = await self._stored(session, tenant.tenant_id, prepared, call.trace_id)
        await own_transaction.aclose()
        return (
            found if isinstance(found, Outcome) else await self.run(tenant, prepared, call, found)
        )

    async def _stored(
        self, session: AsyncSession, tenant_id: str, prepared: Prepared, trace_id: str
    ) -> Outcome | Unfinished | None:
        """The stored answer, or what holds the key (``replay``), once the request's
        connection is admitted; a new execution's connection must not be revoked."""
        connection = await ingest.admit_connection(session, tenant_id, prepared)
        found = await self.replay(session, tenant_id, prepared, trace_id)
        if found is None:
            ingest.admit_new(connection)
        return found

    def _count_copy_hits(self, prepared: Prepared) -> Callable[[Outcome], None]:
        """What a copy answered by its flight adds: a hit, when the answer is a stored
        receipt (an idempotent hit like its leader)."""

        def copied(outcome: Outcome) -> None:
            receipt = outcome.envelope.receipt
            if outcome.stored and receipt is not None:
                self.hits.note(
                    receipt.tenant_id,
                    receipt.id,
                    receipt.capability_id,
                    prepared.idempotency_key,
                    datetime.now(UTC),
                )

        return copied

    async def replay(
        self, session: AsyncSession, tenant_id: str, prepared: Prepared, trace_id: str
    ) -> Outcome | Unfinished | None:
        """The stored answer for a live key, from Postgres (``replay.from_postgres``);
        otherwise the execution that holds the key (``Unfinished``) or None (a new one)."""
        return await replay.from_postgres(
            session, self.sealer, self.hits, self.answers, tenant_id, prepared
        )

    async def run(
        self,
        tenant: AuthenticatedTenant,
        prepared: Prepared,
        call: Call,
        unfinished: Unfinished | None = None,
    ) -> Outcome:
        """Start the run, or attach to the one already running for this key, and wait.

        An unfinished execution keeps its receipt id: attached to while its run goes on,
        resumed by a new run once it has ended without recording. The new run derives the
        same downstream ``Idempotency-Key``, so the provider dedupes an effect the ended run
        may already have caused.

        With the tenant's ``policy_mode`` (from before it had policy documents; None: the run
        cannot wait for a person), when the policy in force is strict, a run that waits for
        a person is answered ``accepted`` with its approval as soon as it asks, not after
        the whole wait budget. Whether it is strict is read only for a run still going after
        ``wait.APPROVAL_POLL_SECONDS``: most are answered before."""
        launch = start.launch(self._settings, self.start_keys, tenant, prepared, call, unfinished)
        starting = functools.partial(start.start, self._client, self._settings, launch, prepared)
        # Not after a completed run: that run recorded a receipt, which answers this request
        # (a look-up that raced the run's end, e.g. a start slowed by a Temporal restart,
        # would otherwise start a run that only replays the receipt). A run that ended
        # without recording (terminated, failed inside Moat) is resumed by a new one; after
        # a run that ended failed with its execution's receipt, the new run replays it.
        try:
            handle = await starting(WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
        except WorkflowAlreadyStartedError:
            async with tenancy.tenant_transaction(self._sessions, tenant.tenant_id) as session:
                found = await self.replay(session, tenant.tenant_id, prepared, call.trace_id)
            if isinstance(found, Outcome):
                return found
            # The completed run's key has expired since: a new execution takes it.
            handle = await starting(WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        watch = None if prepared.request.dry_run else tenant.policy_mode
        try:
            result = await wait.result_within(
                handle,
                self._sessions,
                tenant.tenant_id,
                launch.workflow_id,
                call.wait_seconds,
                watch,
                self.reads,
            )
        except TimeoutError:
            return await results.accepted(self._sessions, handle, launch, prepared, call.trace_id)
        except WorkflowFailureError as err:
            raise results.failed(err, launch.workflow_id) from err
        return await results.of_result(
            self._sessions, self.sealer, result, launch, prepared, call.trace_id
        )

    async def restart(
        self, receipt: Receipt, new_key: str, scopes: Sequence[str], api_key_id: str
    ) -> str:
        """Start the execution of ``receipt`` again under ``new_key`` (a new workflow, so a
        new downstream ``Idempotency-Key``), from the input its run was started with, for
        the key ``api_key_id`` with ``scopes`` (who restarts it, never the original caller:
        ``scope_missing`` unless they cover the capability's); returns the new receipt id.
        Only for an effect an operator states did not happen."""
        return await start.restart(
            self._client, self._settings, self.start_keys, receipt, new_key, scopes, api_key_id
        )

    async def started(self, tenant_id: str, receipt_id: str, trace_id: str) -> Envelope | None:
        """The ``accepted`` envelope of a run no worker has picked up yet (``status``)."""
        return await status.started(self._client, tenant_id, receipt_id, trace_id)


def _flight_of(call: Call, prepared: Prepared) -> Hashable:
    """What makes two calls copies sharing one flight: who calls (the presented key's hash:
    each copy's key is verified before it joins, never taken on trust from the copy that
    went first) and everything that shapes the answer. A dry run never shares."""
    if prepared.request.dry_run:
        return object()
    req = prepared.request
    assert call.presented_key is not None
    caller = KeyCache.digest(call.presented_key)
    return (
        caller,
        prepared.idempotency_key,
        prepared.input_hash,
        req.connection_id,
        call.wait_seconds,
    )
