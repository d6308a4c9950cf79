"""The outbox relay: turns each pending outbox row into one ``DeliverWebhook`` workflow.

It wakes on the ``moat_outbox`` NOTIFY that a commit of new or re-pending rows sends, and
polls every ``outbox_poll_seconds`` as well, for a notification missed while it was not
listening (the measured comparison is in ``bench/README.md``). Rows are claimed with
``FOR UPDATE SKIP LOCKED``, so several relays share the work, and the workflow id is
derived from the row, so a relay that dies between starting a workflow and marking its row
starts nothing twice: the next one finds the workflow already there. Deliveries go to the
delivery queue (``MOAT_DELIVERY_TASK_QUEUE``), off the executions' slots and HTTP pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from schemas.names import DELIVER_WEBHOOK_WORKFLOW, OUTBOX_CHANNEL
from schemas.settings import MoatSettings
from schemas.webhooks import DeliveryInput, delivery_workflow_id
from store import outbox
from workflows.fairness import tenant_priority

log = logging.getLogger("moat.outbox")

BATCH = 200
RECONNECT_SECONDS = 1.0


def libpq_url(sqlalchemy_url: str) -> str:
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


class OutboxRelay:
    def __init__(
        self,
        client: Client,
        sessions: async_sessionmaker[AsyncSession],
        *,
        task_queue: str,
        listen_url: str | None,
        poll_seconds: float,
        batch: int = BATCH,
        tenant_id: str | None = None,
        settings: MoatSettings | None = None,
    ) -> None:
        self._client = client
        self._sessions = sessions
        self._task_queue = task_queue
        self._listen_url = listen_url
        self._poll = poll_seconds
        self._batch = batch
        self._tenant = tenant_id  # one tenant's rows only (tests, benchmarks); None: all
        self._wake = asyncio.Event()
        self._settings = settings  # the tenants' fairness weights; None: the default

    @classmethod
    def from_settings(
        cls,
        client: Client,
        sessions: async_sessionmaker[AsyncSession],
        settings: MoatSettings,
        *,
        task_queue: str | None = None,
        tenant_id: str | None = None,
    ) -> OutboxRelay:
        return cls(
            client,
            sessions,
            task_queue=task_queue or settings.deliveries_task_queue,
            listen_url=libpq_url(settings.app_sqlalchemy_url) if settings.outbox_listen else None,
            poll_seconds=settings.outbox_poll_seconds,
            tenant_id=tenant_id,
            settings=settings,
        )

    async def dispatch(self) -> int:
        """Start the delivery of every due row (one batch); returns how many were due."""
        async with self._sessions.begin() as session:
            due = await outbox.claim_due(session, self._batch, self._tenant)
            await asyncio.gather(*(self._start(d) for d in due))
            await outbox.mark_dispatched(session, due)
        return len(due)

    async def _start(self, due: outbox.Due) -> None:
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._client.start_workflow(
                DELIVER_WEBHOOK_WORKFLOW,
                DeliveryInput(tenant_id=due.tenant_id, outbox_id=due.id, generation=due.generation),
                id=delivery_workflow_id(due.id, due.generation),
                task_queue=self._task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                priority=tenant_priority(
                    due.tenant_id,
                    self._settings.fairness_weight_of(due.tenant_id) if self._settings else None,
                ),
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set."""
        listener = asyncio.create_task(self._listen()) if self._listen_url else None
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    if await self.dispatch() >= self._batch:
                        continue
                except Exception:
                    log.exception("outbox relay: dispatch failed; retrying")
                woken = asyncio.create_task(self._wake.wait())
                await asyncio.wait(
                    {woken, stopping}, timeout=self._poll, return_when="FIRST_COMPLETED"
                )
                woken.cancel()
        finally:
            stopping.cancel()
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener

    async def _listen(self) -> None:
        assert self._listen_url is not None
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._listen_url, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {OUTBOX_CHANNEL}")
                    self._wake.set()  # rows may have arrived while nobody listened
                    async for _ in conn.notifies():
                        self._wake.set()
            except psycopg.Error:
                log.warning("outbox relay: lost its LISTEN connection; reconnecting")
                await asyncio.sleep(RECONNECT_SECONDS)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[OutboxRelay]:
        """``async with relay.running():`` relays in the background meanwhile."""
        stop = asyncio.Event()
        task = asyncio.create_task(self.run(stop))
        try:
            yield self
        finally:
            stop.set()
            await task
