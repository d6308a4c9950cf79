"""The policy step's round trips: a fresh run's check is two (its opening statements with
the budget's lock, its decision with its events and COMMIT), and answers as before whatever it
finds: a retried check gets the decision first recorded, a key another running execution
holds is busy, a decision recorded by an earlier run is the one a later run gets."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy import event as sa_event
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.evidence import continue_chain
from activities.execute.events import (
    ADAPTER_ACTOR,
    attempt_started,
    chained,
    intake_events,
    policy_events,
)
from activities.execute.policy import PolicyStep, decision_id_for
from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from schemas.events import EventType
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.quotas import DEFAULT_QUOTAS, Quota
from schemas.records import Decision, ExecutionStatus, PolicyMode, Receipt, RuleHit
from schemas.run import PolicyInput, PolicyOutcome
from schemas.start import StartClaims
from store import budgets, db, policy, policy_versions, receipts, tenancy, tenants
from store import events as event_log
from store.keyrings.start import StartKeyring
from store.models import BudgetHold, IdempotencyClaim, PolicyDecisionRow

KEYS = StartKeyring({"k": b"0" * 32}, "k")
ECHO = CapabilityCatalog().get("demo.echo")


@pytest.fixture
async def tenant_id(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        return (await tenants.create_tenant(session, f"pr-{uuid.uuid4().hex[:8]}")).id


def _input(tenant_id: str, key: str, receipt_id: str, run_id: str | None = None) -> PolicyInput:
    assert ECHO is not None
    ref = ExecutionRef(
        tenant_id=tenant_id,
        receipt_id=receipt_id,
        idempotency_key=key,
        input_hash="h",
        workflow_id=f"wf-{receipt_id}",
        run_id=run_id or str(uuid7()),
    )
    inp = PolicyInput(ref=ref, capability=ECHO, idempotency_ttl_seconds=600, scopes=["execute:*"])
    return inp.model_copy(update={"start_signature": KEYS.sign(StartClaims.of_policy(inp))})


class Trips:
    """Round trips of the app role's engine: a pipeline, a statement outside one (two when
    psycopg sends its BEGIN first), a COMMIT psycopg sends."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], mp: pytest.MonkeyPatch):
        self.count: Counter[str] = Counter()
        engine = sessions.kw["bind"].sync_engine

        def idle(conn: Any) -> bool:
            raw = conn.connection.driver_connection
            return bool(raw.info.transaction_status.name == "IDLE")

        def statement(conn: Any, *args: Any) -> None:
            self.count["trips"] += 2 if idle(conn) else 1

        def commit(conn: Any) -> None:
            self.count["trips"] += 0 if idle(conn) else 1

        sa_event.listen(engine, "before_cursor_execute", statement)
        sa_event.listen(engine, "commit", commit)
        pipelined, rows = db.pipelined, db.pipelined_rows

        async def counted(session: AsyncSession, sent: Sequence[Any]) -> Any:
            self.count["trips"] += 1
            return await pipelined(session, sent)

        async def counted_rows(
            session: AsyncSession, sent: Sequence[tuple[str, Mapping[str, Any]]], **kw: Any
        ) -> Any:
            self.count["trips"] += 1
            return await rows(session, sent, **kw)

        mp.setattr(db, "pipelined", counted)
        mp.setattr(db, "pipelined_rows", counted_rows)


async def _check(app_sessions: async_sessionmaker[AsyncSession], inp: PolicyInput) -> PolicyOutcome:
    outcome: PolicyOutcome = await ActivityEnvironment().run(
        PolicyStep(app_sessions, KEYS).check_policy, inp
    )
    return outcome


async def _decisions(sessions: async_sessionmaker[AsyncSession], receipt_id: str) -> int:
    async with sessions() as s:
        rows = await s.execute(
            select(PolicyDecisionRow).where(PolicyDecisionRow.receipt_id == receipt_id)
        )
        return len(rows.all())


async def test_a_fresh_check_is_two_round_trips_and_a_retry_gets_the_first_decision(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receipt_id = str(uuid7())
    inp = _input(tenant_id, "fresh", receipt_id)
    trips = Trips(app_sessions, monkeypatch)
    first = await _check(app_sessions, inp)
    assert trips.count["trips"] == 2
    assert (first.decision, first.rule_hit, first.resumed) == (
        Decision.ALLOW,
        RuleHit.ALLOWED,
        False,
    )
    assert first.policy_decision_id == decision_id_for(receipt_id)
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, receipt_id)
        assert await event_log.verify(s, tenant_id) == []
    assert [e.event_type for e in events] == [
        EventType.SIGNAL_RECEIVED,
        EventType.SIGNAL_PROCESSING_STARTED,
        EventType.RUN_STARTED,
        EventType.POLICY_EVALUATED,
        EventType.EFFECT_REQUESTED,
    ]
    again = await _check(app_sessions, inp)  # a retried check of the same run
    assert again.resumed and again.model_copy(update={"resumed": False}) == first
    async with sessions() as s:
        assert len(await event_log.events_of(s, tenant_id, receipt_id)) == len(events)
    assert await _decisions(sessions, receipt_id) == 1


async def test_a_check_asked_to_log_the_first_attempt_writes_its_start_in_its_two_trips(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``log_first_attempt``: a check that lets the run call at once writes the adapter's
    first attempt's start as the adapter step would (its actor, attempt 1), in the same two
    round trips, and says so; the run's folder is prepared beside it. A retried check
    writes it no second time."""
    receipt_id = str(uuid7())
    inp = _input(tenant_id, "ahead", receipt_id).model_copy(update={"log_first_attempt": True})
    prepared: list[tuple[str, str]] = []

    async def prepare(tenant: str, run_id: str) -> None:
        prepared.append((tenant, run_id))

    step = PolicyStep(app_sessions, KEYS, prepare=prepare)
    trips = Trips(app_sessions, monkeypatch)
    first: PolicyOutcome = await ActivityEnvironment().run(step.check_policy, inp)
    assert trips.count["trips"] == 2
    assert (first.decision, first.first_attempt_logged) == (Decision.ALLOW, True)
    assert prepared == [(tenant_id, inp.ref.run_id)]
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, receipt_id)
        assert await event_log.verify(s, tenant_id) == []
    assert [e.event_type for e in events][-3:] == [
        EventType.EFFECT_REQUESTED,
        EventType.STEP_STARTED,
        EventType.TOOL_CALLED,
    ]
    started, called = events[-2:]
    assert started.actor == called.actor == ADAPTER_ACTOR
    # The event the adapter's first attempt would write (a worker of code from before does).
    adapters = continue_chain(tenant_id, receipt_id, inp.ref.run_id, ADAPTER_ACTOR)
    [*_, own] = chained(adapters, attempt_started(receipt_id, inp.capability, 1, False))
    assert called.id == own.id
    assert (called.event_data["attempt"], called.event_data["resumed"]) == (1, False)
    again: PolicyOutcome = await ActivityEnvironment().run(step.check_policy, inp)
    assert again.first_attempt_logged and again.resumed
    async with sessions() as s:
        assert len(await event_log.events_of(s, tenant_id, receipt_id)) == len(events)


@pytest.mark.parametrize("stops", ["budget", "approval", "not asked"])
async def test_a_check_logs_no_attempt_the_run_does_not_make_at_once(
    stops: str,
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Denied, waiting for a person's approval, or not asked: no attempt's start."""
    assert ECHO is not None
    async with sessions.begin() as s:
        if stops == "budget":
            await budgets.set_budget(s, tenant_id, ECHO.id, 0, "day")
        elif stops == "approval":
            await tenancy.set_tenant(s, tenant_id)
            rule = {"capability": "demo.*", "requires_approval": True}
            document = {"mode": "strict", "rules": [rule]}
            await policy_versions.add(s, tenant_id, "strict", document, "t")
    receipt_id = str(uuid7())
    inp = _input(tenant_id, f"no-{stops}", receipt_id)
    inp = inp.model_copy(update={"log_first_attempt": stops != "not asked"})
    outcome = await _check(app_sessions, inp)
    assert not outcome.first_attempt_logged
    assert outcome.calls_at_once == (stops == "not asked")
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, receipt_id)
    assert not {EventType.STEP_STARTED, EventType.TOOL_CALLED} & {e.event_type for e in events}


async def test_a_key_held_by_a_running_execution_is_busy_and_records_nothing(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    await _check(app_sessions, _input(tenant_id, "busy", str(uuid7())))
    other = str(uuid7())
    with pytest.raises(ApplicationError) as raised:
        await _check(app_sessions, _input(tenant_id, "busy", other))
    assert raised.value.type == ErrorCode.IDEMPOTENCY_KEY_BUSY
    assert await _decisions(sessions, other) == 0
    async with sessions() as s:
        assert await event_log.events_of(s, tenant_id, other) == []


async def test_a_later_run_gets_the_decision_recorded_first(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key's claim gone (taken afresh by the later run) while the decision stays: the
    check's pipelined insert finds it recorded, commits nothing, and the check runs
    again; its run's events name the first decision, made under policy version 0."""
    receipt_id = str(uuid7())
    first = await _check(app_sessions, _input(tenant_id, "later", receipt_id))
    async with sessions.begin() as s:
        await s.execute(delete(IdempotencyClaim).where(IdempotencyClaim.tenant_id == tenant_id))
        await tenancy.set_tenant(s, tenant_id)
        rule = {"capability": "demo.*", "requires_approval": True}
        await policy_versions.add(s, tenant_id, "strict", {"mode": "strict", "rules": [rule]}, "t")
    run_id = str(uuid7())
    tries: list[bool] = []
    check = PolicyStep._check

    async def tried(self: PolicyStep, inp: PolicyInput, now: Any, *, committing: bool) -> Any:
        tries.append(committing)
        return await check(self, inp, now, committing=committing)

    monkeypatch.setattr(PolicyStep, "_check", tried)
    later = await _check(app_sessions, _input(tenant_id, "later", receipt_id, run_id))
    assert tries == [True, False] and not later.resumed
    assert later.model_copy(update={"resumed": False}) == first
    assert first.policy_version == 0 and first.rule_hit == RuleHit.ALLOWED
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, receipt_id)
        assert await event_log.verify(s, tenant_id) == []
    evaluated = [e for e in events if e.event_type == EventType.POLICY_EVALUATED]
    assert [e.event_data["run_id"] for e in evaluated][-1] == run_id
    assert evaluated[-1].event_data["policy_version"] == 0
    assert evaluated[-1].event_data["rule_hit"] == RuleHit.ALLOWED
    assert await _decisions(sessions, receipt_id) == 1


async def test_a_budget_is_locked_held_and_counted_by_the_next_check(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    assert ECHO is not None
    async with sessions.begin() as s:
        await budgets.set_budget(s, tenant_id, ECHO.id, 1, "day")
    first = await _check(app_sessions, _input(tenant_id, "b1", str(uuid7())))
    assert (first.decision, first.budget_held) == (Decision.ALLOW, True)
    second_id = str(uuid7())
    second = await _check(app_sessions, _input(tenant_id, "b2", second_id))
    assert (second.decision, second.rule_hit) == (Decision.DENY, RuleHit.BUDGET_EXCEEDED)
    assert not second.budget_held
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, second_id)
        assert await event_log.verify(s, tenant_id) == []
    assert [e.event_type for e in events][-1] == EventType.POLICY_EVALUATED


@pytest.mark.parametrize("decision", list(Decision))
@pytest.mark.parametrize("resumed", [False, True])
def test_a_check_s_events_announce_nothing(decision: Decision, resumed: bool) -> None:
    """A fresh check writes its events with its decision and COMMIT, past
    ``announcements.announce``: none of them may be an event it announces."""
    inp = _input("t", "k", "r")
    outcome = PolicyOutcome(
        policy_decision_id="d",
        decision=decision,
        rule_hit=RuleHit.ALLOWED,
        mode=PolicyMode.STANDARD,
    )
    drafts = intake_events(inp, resumed) + policy_events(inp, "d", outcome)
    assert not {d.event_type for d in drafts} & event_log._ANNOUNCED


async def test_a_fresh_check_holding_a_budget_is_two_round_trips(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget's lock (with its limit and period) goes in the opening round trip, its
    guard and hold with the decision, events and COMMIT; a retried check gets the first
    decision with its hold kept once. A budget used up fails the guard, and the check runs
    again counting it first: its denial is four round trips, with its figures."""
    assert ECHO is not None
    async with sessions.begin() as s:
        await budgets.set_budget(s, tenant_id, ECHO.id, 1, "day")
    receipt_id = str(uuid7())
    inp = _input(tenant_id, "bt1", receipt_id)
    trips = Trips(app_sessions, monkeypatch)
    first = await _check(app_sessions, inp)
    assert trips.count["trips"] == 2
    assert (first.decision, first.budget_held) == (Decision.ALLOW, True)
    async with sessions() as s:
        holds = await s.execute(select(BudgetHold).where(BudgetHold.tenant_id == tenant_id))
        assert [h.receipt_id for h in holds.scalars()] == [receipt_id]
        assert await event_log.verify(s, tenant_id) == []
    again = await _check(app_sessions, inp)
    assert again.resumed and again.model_copy(update={"resumed": False}) == first
    trips.count.clear()
    second_id = str(uuid7())
    second = await _check(app_sessions, _input(tenant_id, "bt2", second_id))
    assert trips.count["trips"] == 4
    assert (second.decision, second.rule_hit) == (Decision.DENY, RuleHit.BUDGET_EXCEEDED)
    assert second.reason == "budget 1 per day used up: 0 used, 1 in flight"
    assert not second.budget_held and await _decisions(sessions, second_id) == 1
    async with sessions() as s:
        state = await budgets.budget_state(s, tenant_id, ECHO.id, datetime.now(UTC))
    assert state is not None and (state.used, state.held) == (0, 1)


@pytest.mark.parametrize("mode", ["audit", "strict"])
async def test_a_used_up_budget_decides_first_whatever_the_check_went_on_to_decide(
    mode: str,
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget used up decides before what the check goes on to: under audit it is what
    would deny (the unit held all the same), decided on the rerun after the guard failed;
    under strict it denies before a quota of approvals full would, the budget counted
    before the approval's checks. One decision recorded."""
    assert ECHO is not None
    async with sessions.begin() as s:
        await budgets.set_budget(s, tenant_id, ECHO.id, 0, "month")
        await tenancy.set_tenant(s, tenant_id)
        rule = {"capability": "demo.*", "requires_approval": True}
        await policy_versions.add(s, tenant_id, mode, {"mode": mode, "rules": [rule]}, "t")
    receipt_id = str(uuid7())
    trips = Trips(app_sessions, monkeypatch)
    step = PolicyStep(app_sessions, KEYS, {**DEFAULT_QUOTAS, Quota.PENDING_APPROVALS: 0})
    outcome = await ActivityEnvironment().run(
        step.check_policy, _input(tenant_id, f"used-up-{mode}", receipt_id)
    )
    # Audit: the guard fails and the check runs again; strict: the budget counted first.
    assert trips.count["trips"] == (4 if mode == "audit" else 3)
    denied = Decision.WOULD_DENY if mode == "audit" else Decision.DENY
    assert (outcome.decision, outcome.rule_hit) == (denied, RuleHit.BUDGET_EXCEEDED)
    assert outcome.budget_held == (mode == "audit")
    assert await _decisions(sessions, receipt_id) == 1
    async with sessions() as s:
        state = await budgets.budget_state(s, tenant_id, ECHO.id, datetime.now(UTC))
        assert await event_log.verify(s, tenant_id) == []
    assert state is not None and state.held == (1 if mode == "audit" else 0)


async def test_an_idempotent_hit_is_two_round_trips_and_a_retry_gets_the_first_decision(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose key holds a recorded receipt: its opening, then its decision sent with
    the COMMIT; a retried check gets the decision recorded first."""
    assert ECHO is not None
    first_id = str(uuid7())
    first = await _check(app_sessions, _input(tenant_id, "hit", first_id))
    receipt = Receipt(
        id=first_id, capability_id=ECHO.id, capability_version="1", adapter_id="a",
        tenant_id=tenant_id, connection_id="", request_id="q", timestamp=datetime.now(UTC),
        latency_ms=1, idempotency_key="hit", input_hash="h", status=ExecutionStatus.SUCCESS,
        policy_decision_id=first.policy_decision_id, workflow_id=f"wf-{first_id}", run_id="r",
        trace_id="t",
    )  # fmt: skip
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        assert await receipts.insert_receipt(session, receipt)
    hit_id = str(uuid7())
    inp = _input(tenant_id, "hit", hit_id)
    trips = Trips(app_sessions, monkeypatch)
    hit = await _check(app_sessions, inp)
    assert trips.count["trips"] == 2
    assert (hit.decision, hit.rule_hit) == (Decision.ALLOW, RuleHit.IDEMPOTENT_HIT)
    assert hit.existing_receipt is not None and hit.existing_receipt.id == first_id
    assert hit.policy_decision_id == decision_id_for(hit_id)
    trips.count.clear()
    again = await _check(app_sessions, inp)
    assert trips.count["trips"] == 2 and again == hit
    assert await _decisions(sessions, first_id) == 2  # its own, and the hit's


async def test_a_decision_a_concurrent_check_recorded_is_read_once_committed(
    tenant_id: str,
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision's statement returns none when a concurrent check recorded it after the
    statement's snapshot: the one recorded is read after the COMMIT."""
    values: dict[str, Any] = dict(
        id=str(uuid7()), tenant_id=tenant_id, receipt_id="r", capability_id="c",
        idempotency_key="k", mode="standard", decision="allow", rule_hit="ALLOWED",
        reason="", is_synthetic=False, policy_version=0,
    )  # fmt: skip
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        await policy.insert_policy_decision(session, **values)
    missed = "SELECT * FROM policy_decisions WHERE id = %(id)s AND false"
    monkeypatch.setattr(policy, "_INSERT_OR_FIRST", missed)
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        hit = {**values, "rule_hit": "IDEMPOTENT_HIT"}
        row = await policy.insert_policy_decision_committing(session, hit)
    assert (row.id, row.rule_hit) == (values["id"], "ALLOWED")
