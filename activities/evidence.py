"""Building the events a step appends to the log, with their causal links.

Event ids are derived from the execution (receipt id), the run and the event's name, so a
retried activity writes nothing twice; each event names the one that caused it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.events import AggregateType, Event, EventDraft, EventType, event_id
from store import events as event_log
from store import tenancy
from store.announcements import Subscribed


class Chain:
    """Events of one execution and run, each caused by the previous one; the first by
    ``cause``, or with ``cause_from_log`` by the execution's latest event in the log when
    the chain is appended (``append``)."""

    def __init__(
        self,
        tenant_id: str,
        receipt_id: str,
        run_id: str,
        actor: str,
        cause: str | None = None,
        *,
        cause_from_log: bool = False,
    ) -> None:
        assert cause is None or not cause_from_log
        self.tenant_id = tenant_id
        self.receipt_id = receipt_id
        self.run_id = run_id
        self.actor = actor
        self.cause = cause
        self.cause_from_log = cause_from_log
        self.drafts: list[EventDraft] = []

    @contextlib.contextmanager
    def acting(self, actor: str) -> Iterator[None]:
        """The events added in the block are ``actor``'s: another step's, written in this
        step's transaction."""
        own, self.actor = self.actor, actor
        try:
            yield
        finally:
            self.actor = own

    def add(
        self,
        event_type: EventType,
        aggregate: AggregateType,
        aggregate_id: str,
        name: str | None = None,
        *,
        per_run: bool = True,
        **data: Any,
    ) -> EventDraft:
        """The next event; ``per_run`` False: one per execution, whichever run writes it
        first (its id names no run, so a later run's copy is the same event)."""
        run = self.run_id if per_run else ""
        draft = EventDraft(
            id=event_id(self.receipt_id, run, name or event_type.value),
            tenant_id=self.tenant_id,
            event_type=event_type,
            aggregate_type=aggregate,
            aggregate_id=aggregate_id,
            event_data={"run_id": self.run_id, **data},
            correlation_id=self.receipt_id,
            causation_id=self.cause,
            actor=self.actor,
        )
        self.drafts.append(draft)
        self.cause = draft.id
        return draft

    async def append(
        self, session: AsyncSession, subscribed: Subscribed | None = None
    ) -> list[Event]:
        """``event_log.append`` of the chain's events, the first one's cause read from the
        log by the statement that writes it when the chain says so; ``subscribed``: what
        the tenant's webhooks take, when the transaction read it already."""
        return await event_log.append(
            session, self.drafts, first_cause_from_log=self.cause_from_log, subscribed=subscribed
        )


def continue_chain(tenant_id: str, receipt_id: str, run_id: str, actor: str) -> Chain:
    """A chain whose first event is caused by the execution's latest event in the log, read
    when the chain is appended by the statement that writes it (``Chain.append``, which the
    caller must use)."""
    return Chain(tenant_id, receipt_id, run_id, actor, cause_from_log=True)


async def start_chain(
    session: AsyncSession, tenant_id: str, receipt_id: str, run_id: str, actor: str
) -> Chain:
    """``continue_chain`` as a transaction's first step: the transaction is scoped to the
    tenant (one round trip with its ``BEGIN``)."""
    await tenancy.set_tenant(session, tenant_id)
    return continue_chain(tenant_id, receipt_id, run_id, actor)


def step_id(receipt_id: str, step: str) -> str:
    return f"{receipt_id}:{step}"


def signal_id(receipt_id: str) -> str:
    """The aggregate of an execution's intake events (``SIGNAL_*``): the request it answers."""
    return step_id(receipt_id, "signal")
