"""The event log and its ``runs`` projection. Appending an event and moving the projection
happen in the caller's transaction, together with the state change the event records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Boolean, Integer, String, bindparam, case, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.events import (
    EffectOrigin,
    Event,
    EventDraft,
    EventType,
    RunState,
    apply,
    delta,
    effect_origin,
)
from store import announcements, db, event_writes, tenancy
from store.models import OrchestrationEvent, RunRow

_EVENTS = db.table_of(OrchestrationEvent)
_RUNS = db.table_of(RunRow)
# Built once: the hot path executes them with fresh parameters only, so SQLAlchemy neither
# rebuilds nor re-keys a statement per event (that cost more than the round trips).
_INSERT_EVENTS = (
    insert(_EVENTS).on_conflict_do_nothing(index_elements=[_EVENTS.c.id]).returning(*_EVENTS.c)
)


def _moved() -> dict[str, Any]:
    """A run moved by a ``RunDelta`` (its fields as ``d_*`` parameters), in SQL."""
    return {
        "total_steps": _RUNS.c.total_steps + bindparam("d_total_steps", type_=Integer),
        "failed_steps": _RUNS.c.failed_steps + bindparam("d_failed_steps", type_=Integer),
        "retries": _RUNS.c.retries + bindparam("d_retries", type_=Integer),
        "replays": _RUNS.c.replays + bindparam("d_replays", type_=Integer),
        "status": func.coalesce(bindparam("d_status", type_=String), _RUNS.c.status),
        "completed_at": case(
            (
                bindparam("d_completed", type_=Boolean),
                bindparam("d_completed_at", type_=_RUNS.c.completed_at.type),
            ),
            else_=_RUNS.c.completed_at,
        ),
        "run_id": func.coalesce(bindparam("d_run_id", type_=String), _RUNS.c.run_id),
        # The latest event's, as a rebuild (in sequence order) has it, whichever of two
        # concurrent appends commits last.
        "last_sequence": func.greatest(
            _RUNS.c.last_sequence, bindparam("d_last_sequence", type_=BigInteger)
        ),
    }


# The whole run, written as it is (``repair``).
_UPSERT_RUN = insert(_RUNS)
_UPSERT_RUN = _UPSERT_RUN.on_conflict_do_update(
    index_elements=[_RUNS.c.receipt_id],
    set_={c.name: _UPSERT_RUN.excluded[c.name] for c in _RUNS.c if c.name != "receipt_id"},
)
# The projection moves in one statement, without reading the run first: a batch that starts
# the run inserts it (or, a run started again, moves the one there); any other batch moves
# the run if there is one. Counters are added in SQL, so concurrent appends need no lock.
_START_RUN = insert(_RUNS).on_conflict_do_update(index_elements=[_RUNS.c.receipt_id], set_=_moved())
_MOVE_RUN = update(_RUNS).where(_RUNS.c.receipt_id == bindparam("key")).values(_moved())


def _event(row: Any) -> Event:
    return Event.model_validate(row, from_attributes=True)


def _state(row: Any) -> RunState:
    return RunState.model_validate(row, from_attributes=True)


async def append(
    session: AsyncSession, drafts: Sequence[EventDraft], *, first_cause_from_log: bool = False
) -> list[Event]:
    """Append events (ids already present are skipped: a retried step) and apply the new
    ones to the projection. Returns the events actually written, in sequence order.

    ``first_cause_from_log``: the first draft is caused by the execution's latest event in
    the log, read by the statement that writes it (the drafts are one execution's)."""
    if not drafts:
        return []
    if len({(d.tenant_id, d.correlation_id) for d in drafts}) == 1:
        written = await _append_one_execution(session, drafts, first_cause_from_log)
    else:
        assert not first_cause_from_log, "a cause from the log names one execution"
        # One round trip for all of them (SQLAlchemy batches the rows into one INSERT).
        result = await session.execute(_INSERT_EVENTS, [d.model_dump(mode="json") for d in drafts])
        written = sorted((_event(r) for r in result.mappings()), key=lambda e: e.sequence_number)
        await _project(session, written)
    await announcements.announce(session, written)
    return written


# Events that ``announcements.announce`` acts on: appended with them in their transaction.
_ANNOUNCED = frozenset(announcements._OUTCOMES) | frozenset(announcements._APPROVALS)


class PartialAppend(Exception):
    """``append_committing`` (or ``committed``) found some of its writes made already:
    nothing was written and the transaction was not committed. Append the events in a new
    transaction with ``append`` (which moves the projection by the events it writes)."""


async def append_committing(
    session: AsyncSession,
    drafts: Sequence[EventDraft],
    *,
    scope: str | None = None,
    first_cause_from_log: bool = False,
) -> list[Event]:
    """``append`` as the transaction's last statement, sent with its ``COMMIT`` in one round
    trip; with ``scope`` (the tenant) also as its first, the transaction's ``BEGIN`` and
    tenant in the same round trip. Returns the events written, in sequence order.

    A batch ``append`` cannot write in one statement (events of several executions, or
    events that announce something) is appended by ``append`` and committed by the caller's
    session. Raises ``PartialAppend`` when some drafts were already in the log."""
    if not committable(drafts):
        if scope is not None:
            await tenancy.set_tenant(session, scope)
        return await append(session, drafts, first_cause_from_log=first_cause_from_log)
    await session.flush()  # the pipeline goes past the session's ORM changes
    statements = [] if scope is None else [(tenancy.SET_TENANT, {"tenant": scope})]
    statements.append(event_writes.committing(drafts, first_cause_from_log))
    results = await committed(session, statements)
    return written_of(results[-1])


def committable(drafts: Sequence[EventDraft]) -> bool:
    """Whether ``drafts`` can be written with their transaction's COMMIT: one execution's
    (one statement), none announcing anything (``announce`` writes more)."""
    one = len({(d.tenant_id, d.correlation_id) for d in drafts}) == 1
    return one and not any(d.event_type in _ANNOUNCED for d in drafts)


async def committed(
    session: AsyncSession, statements: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[db.Rows]:
    """``db.pipelined_rows`` with the COMMIT, for statements ending with an
    ``event_writes.committing`` one: ``PartialAppend`` when a statement failed with the
    SQLSTATE ``event_writes.PARTIAL`` (its write was made already)."""
    try:
        return await db.pipelined_rows(session, statements, commit=True)
    except DBAPIError as err:
        if getattr(err.orig, "sqlstate", None) == event_writes.PARTIAL:
            raise PartialAppend(str(err.orig)) from err
        raise


def written_of(rows: db.Rows) -> list[Event]:
    """The events an ``event_writes.committing`` statement wrote, in sequence order."""
    columns, found = rows
    written = (Event.model_validate(dict(zip(columns, row, strict=True))) for row in found)
    return sorted(written, key=lambda e: e.sequence_number)


async def _append_one_execution(
    session: AsyncSession, drafts: Sequence[EventDraft], first_cause_from_log: bool
) -> list[Event]:
    """One execution's drafts written with the projection's move, in one statement. The
    projection moves by exactly the events written: when the statement skipped some (a
    retried step), it moved nothing and the events it wrote move it here."""
    stmt, params = event_writes.statement(drafts, first_cause_from_log)
    result = await session.execute(stmt, params)
    written = sorted((_event(r) for r in result.mappings()), key=lambda e: e.sequence_number)
    if 0 < len(written) < len(drafts):
        await _project(session, written)
    return written


async def _project(session: AsyncSession, events: Sequence[Event]) -> None:
    by_run: dict[str, list[Event]] = {}
    for event in events:
        by_run.setdefault(event.correlation_id, []).append(event)
    for key, batch in by_run.items():
        change = delta(batch)
        moved = {f"d_{k}": v for k, v in change.model_dump(mode="python").items()}
        moved["d_status"] = change.status.value if change.status is not None else None
        started: RunState | None = None
        for event in batch:
            started = apply(started, event)
        if started is not None:
            await session.execute(_START_RUN, {**started.model_dump(mode="python"), **moved})
        else:
            await session.execute(_MOVE_RUN, {"key": key, **moved})


async def _upsert(session: AsyncSession, state: RunState) -> None:
    await session.execute(_UPSERT_RUN, state.model_dump(mode="python"))


async def events_of(session: AsyncSession, tenant_id: str, correlation_id: str) -> list[Event]:
    rows = (
        (
            await session.execute(
                select(OrchestrationEvent)
                .where(
                    OrchestrationEvent.tenant_id == tenant_id,
                    OrchestrationEvent.correlation_id == correlation_id,
                )
                .order_by(OrchestrationEvent.sequence_number)
            )
        )
        .scalars()
        .all()
    )
    return [_event(r) for r in rows]


async def get_run(session: AsyncSession, tenant_id: str, receipt_id: str) -> RunState | None:
    row = await session.get(RunRow, receipt_id)
    return _state(row) if row is not None and row.tenant_id == tenant_id else None


async def rebuild(session: AsyncSession, tenant_id: str | None = None) -> dict[str, RunState]:
    """Replay every event (of one tenant, or all) into fresh run states, in order."""
    stmt = select(OrchestrationEvent).order_by(OrchestrationEvent.sequence_number)
    if tenant_id is not None:
        stmt = stmt.where(OrchestrationEvent.tenant_id == tenant_id)
    states: dict[str, RunState | None] = {}
    for row in (await session.execute(stmt)).scalars():
        event = _event(row)
        states[event.correlation_id] = apply(states.get(event.correlation_id), event)
    return {k: v for k, v in states.items() if v is not None}


async def effect_origins(
    session: AsyncSession, tenant_id: str | None = None
) -> dict[str, EffectOrigin]:
    """Each execution's effect origin (fresh, reconciled, outcome unknown), from its events
    alone: the projection does not hold it, so a rebuild can tell them apart."""
    stmt = (
        select(OrchestrationEvent)
        .where(
            OrchestrationEvent.event_type.in_(
                [EventType.TOOL_COMPLETED.value, EventType.EFFECT_DEAD_LETTERED.value]
            )
        )
        .order_by(OrchestrationEvent.sequence_number)
    )
    if tenant_id is not None:
        stmt = stmt.where(OrchestrationEvent.tenant_id == tenant_id)
    by_execution: dict[str, list[Event]] = {}
    for row in (await session.execute(stmt)).scalars():
        event = _event(row)
        by_execution.setdefault(event.correlation_id, []).append(event)
    origins = {key: effect_origin(events) for key, events in by_execution.items()}
    return {key: origin for key, origin in origins.items() if origin is not None}


async def stored_runs(session: AsyncSession, tenant_id: str | None = None) -> dict[str, RunState]:
    stmt = select(RunRow)
    if tenant_id is not None:
        stmt = stmt.where(RunRow.tenant_id == tenant_id)
    return {r.receipt_id: _state(r) for r in (await session.execute(stmt)).scalars()}


class Difference:
    """A run whose stored projection differs from the one its events give."""

    def __init__(self, receipt_id: str, fields: dict[str, tuple[object, object]]) -> None:
        self.receipt_id = receipt_id
        self.fields = fields  # name -> (stored, from events)

    def __repr__(self) -> str:
        return f"Difference({self.receipt_id!r}, {self.fields!r})"


async def compare(
    session: AsyncSession, tenant_id: str | None = None
) -> tuple[dict[str, RunState], list[Difference]]:
    """Replay the events once: the run states they give, and every run whose stored state
    differs from them (or exists on one side only), ordered by receipt id."""
    rebuilt = await rebuild(session, tenant_id)
    stored = await stored_runs(session, tenant_id)
    out = []
    for receipt_id in sorted(set(rebuilt) | set(stored)):
        a, b = stored.get(receipt_id), rebuilt.get(receipt_id)
        if a == b:
            continue
        if a is None or b is None:
            out.append(Difference(receipt_id, {"run": (a is not None, b is not None)}))
            continue
        da, db = a.model_dump(), b.model_dump()
        out.append(Difference(receipt_id, {k: (da[k], db[k]) for k in da if da[k] != db[k]}))
    return rebuilt, out


async def verify(session: AsyncSession, tenant_id: str | None = None) -> list[Difference]:
    """Every run whose stored state differs from its replayed events."""
    return (await compare(session, tenant_id))[1]


async def repair(
    session: AsyncSession, rebuilt: dict[str, RunState], differences: Sequence[Difference]
) -> None:
    """Rewrite the differing runs' projection rows from the states their events give."""
    for diff in differences:
        state = rebuilt.get(diff.receipt_id)
        if state is not None:
            await _upsert(session, state)
            continue
        row = await session.get(RunRow, diff.receipt_id)
        if row is not None:
            await session.delete(row)
