"""A policy check decided ahead of its reads: a worker that has checked a tenant's
capability before sends the next fresh check's reads, what it expects of them, its decision
and the COMMIT in one round trip (``PolicyStep._ahead``, ``store.policy.EXPECTED``). Whatever
changed since (the document, the tenant's mode, bypass or hosts, the budget, the key's claim),
the check answers as a check of a cold worker would, and writes nothing twice."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.execute.policy import EXPECTED_TENANTS, PolicyStep, Unexpected
from schemas.errors import ErrorCode
from schemas.ids import uuid7
from schemas.records import Decision, PolicyMode, RuleHit
from schemas.run import PolicyInput, PolicyOutcome
from store import budgets, policy_versions, tenancy, tenants
from store import events as event_log
from store.models import Budget, BudgetHold, IdempotencyClaim, PolicyDecisionRow, Tenant
from store.models import OrchestrationEvent as EventRow
from tests.activities.test_policy_round_trips import ECHO, KEYS, Trips, _input


@pytest.fixture
async def tenant_id(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        return (await tenants.create_tenant(session, f"da-{uuid.uuid4().hex[:8]}")).id


class Checks:
    """One worker's policy step, its checks counted: round trips, and checks decided
    ahead that found their reads other than expected."""

    def __init__(
        self, app_sessions: async_sessionmaker[AsyncSession], mp: pytest.MonkeyPatch
    ) -> None:
        self.step = PolicyStep(app_sessions, KEYS)
        self.trips = Trips(app_sessions, mp)
        self.unexpected = 0
        ahead = PolicyStep._ahead

        async def counted(step: PolicyStep, *args: Any) -> Any:
            try:
                return await ahead(step, *args)
            except Unexpected:
                self.unexpected += 1
                raise

        mp.setattr(PolicyStep, "_ahead", counted)

    async def run(
        self, inp: PolicyInput, step: PolicyStep | None = None
    ) -> tuple[PolicyOutcome, int]:
        """The outcome of a check (by this worker's step, or ``step``), and its round trips."""
        before = self.trips.count["trips"]
        check = (step or self.step).check_policy
        outcome: PolicyOutcome = await ActivityEnvironment().run(check, inp)
        return outcome, self.trips.count["trips"] - before

    async def fresh(self, tenant_id: str, key: str) -> tuple[PolicyOutcome, int]:
        return await self.run(_input(tenant_id, key, str(uuid7())))


async def _written(sessions: async_sessionmaker[AsyncSession], tenant_id: str) -> dict[str, int]:
    """What the tenant's checks wrote: decisions, claims, holds, events (the log verified)."""
    async with sessions() as s:
        assert await event_log.verify(s, tenant_id) == []
        counts = {}
        for name, model in (
            ("decisions", PolicyDecisionRow),
            ("claims", IdempotencyClaim),
            ("holds", BudgetHold),
        ):
            rows = await s.execute(select(model).where(model.tenant_id == tenant_id))
            counts[name] = len(rows.all())
        rows = await s.execute(select(EventRow).where(EventRow.tenant_id == tenant_id))
        counts["events"] = len(rows.all())
    return counts


async def test_a_warm_worker_decides_a_fresh_check_in_one_round_trip(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first check of a tenant's capability on a worker is two round trips; the next
    fresh one is one, and records what a cold worker's would: the same decision, the same
    events, its log verified. A retried check of it gets its decision back, writing nothing."""
    checks = Checks(app_sessions, monkeypatch)
    cold_receipt = str(uuid7())
    cold, cold_trips = await checks.run(_input(tenant_id, "one", cold_receipt))
    receipt_id = str(uuid7())
    inp = _input(tenant_id, "two", receipt_id)
    warm, warm_trips = await checks.run(inp)
    assert (cold_trips, warm_trips, checks.unexpected) == (2, 1, 0)
    assert (warm.decision, warm.rule_hit, warm.resumed) == (Decision.ALLOW, RuleHit.ALLOWED, False)
    ignored = {"policy_decision_id"}
    assert warm.model_dump(exclude=ignored) == cold.model_dump(exclude=ignored)
    async with sessions() as s:
        events = await event_log.events_of(s, tenant_id, receipt_id)
        cold_events = await event_log.events_of(s, tenant_id, cold_receipt)
    assert [e.event_type for e in events] == [e.event_type for e in cold_events]
    written = await _written(sessions, tenant_id)
    assert (written["decisions"], written["claims"], written["holds"]) == (2, 2, 0)
    again, _ = await checks.run(inp)  # a retried check of the same run
    assert again.resumed and again.model_copy(update={"resumed": False}) == warm
    assert checks.unexpected == 1  # its claim was not taken just now: the check reads first
    assert await _written(sessions, tenant_id) == written
    async with sessions() as s:
        assert await event_log.events_of(s, tenant_id, receipt_id) == events


async def _add_document(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, document: dict[str, Any]
) -> int:
    async with sessions.begin() as s:
        await tenancy.set_tenant(s, tenant_id)
        row = await policy_versions.add(s, tenant_id, document["mode"], document, "t")
        return row.version


@pytest.mark.parametrize(
    ("document", "rule_hit"),
    [
        ({"mode": "strict", "rules": [{"capability": "demo.*", "requires_approval": True}]},
         RuleHit.APPROVAL_REQUIRED),
        ({"mode": "audit", "rules": []}, RuleHit.ALLOWED),
        ({"mode": "standard", "rules": []}, RuleHit.ALLOWED),
    ],
)  # fmt: skip
async def test_a_new_document_is_decided_by_not_the_one_expected(
    document: dict[str, Any],
    rule_hit: RuleHit,
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A document added after the worker's last check (even one of the same mode) makes
    the check decided ahead find it: nothing is written by it, and the check reads and
    decides by the new document, in two round trips more; the next is one again."""
    checks = Checks(app_sessions, monkeypatch)
    cold_step = PolicyStep(app_sessions, KEYS)  # another worker's, which never checked it
    await checks.fresh(tenant_id, "before")
    before = await _written(sessions, tenant_id)
    version = await _add_document(sessions, tenant_id, document)
    outcome, trips = await checks.fresh(tenant_id, "after")
    cold, cold_trips = await checks.run(_input(tenant_id, "cold", str(uuid7())), cold_step)
    assert (checks.unexpected, trips) == (1, cold_trips + 1)
    ignored = {"policy_decision_id"}
    assert outcome.model_dump(exclude=ignored) == cold.model_dump(exclude=ignored)
    assert (outcome.policy_version, outcome.mode, outcome.rule_hit) == (
        version,
        PolicyMode(document["mode"]),
        rule_hit,
    )
    written = await _written(sessions, tenant_id)
    assert written["decisions"] == before["decisions"] + 2
    if rule_hit == RuleHit.APPROVAL_REQUIRED:
        return  # a call waiting for a person is not decided ahead
    outcome, trips = await checks.fresh(tenant_id, "later")
    assert (checks.unexpected, trips, outcome.policy_version) == (1, 1, version)


@pytest.mark.parametrize("change", ["allow_bypass", "http_allow_hosts", "policy_mode"])
async def test_a_tenant_changed_is_decided_by_as_it_is(
    change: str,
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator's change of the tenant (bypass allowed, the hosts its calls may reach, its
    mode before any document) since the worker's last check is what the next check decides
    by and answers with."""
    checks = Checks(app_sessions, monkeypatch)
    await checks.fresh(tenant_id, "before")
    if change == "allow_bypass":
        await _add_document(sessions, tenant_id, {"mode": "bypass", "rules": []})
        await checks.fresh(tenant_id, "bypass-not-allowed")
    values: dict[str, Any] = {
        "allow_bypass": {"allow_bypass": True},
        "http_allow_hosts": {"http_allow_hosts": ["api.example.test"]},
        "policy_mode": {"policy_mode": "audit"},
    }[change]
    async with sessions.begin() as s:
        await s.execute(update(Tenant).where(Tenant.id == tenant_id).values(**values))
    unexpected = checks.unexpected
    outcome, trips = await checks.fresh(tenant_id, "after")
    assert (checks.unexpected - unexpected, trips) == (1, 3)
    if change == "allow_bypass":
        assert (outcome.mode, outcome.rule_hit) == (PolicyMode.BYPASS, RuleHit.BYPASSED)
    elif change == "http_allow_hosts":
        assert outcome.http_allow_hosts == ["api.example.test"]
    else:
        assert (outcome.mode, outcome.policy_version) == (PolicyMode.AUDIT, 0)


async def test_a_budget_set_changed_or_removed_is_decided_against_as_it_is(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget set after the worker's last check is held by the next; used up, it denies;
    a budget expected and raised, or removed, is decided against as it is now. A budget as
    expected, used up since, fails the decision's guard and the check counts it."""
    assert ECHO is not None
    checks = Checks(app_sessions, monkeypatch)
    await checks.fresh(tenant_id, "none")
    async with sessions.begin() as s:
        await budgets.set_budget(s, tenant_id, ECHO.id, 1, "day")
    held, trips = await checks.fresh(tenant_id, "set")
    assert (held.decision, held.budget_held, trips, checks.unexpected) == (
        Decision.ALLOW,
        True,
        3,
        1,
    )
    denied, trips = await checks.fresh(tenant_id, "used-up")  # expected, and used up
    assert (denied.decision, denied.rule_hit) == (Decision.DENY, RuleHit.BUDGET_EXCEEDED)
    assert (trips, checks.unexpected) == (3, 1)  # the guard's failure, then counted
    async with sessions.begin() as s:
        await budgets.set_budget(s, tenant_id, ECHO.id, 2, "day")
    raised, trips = await checks.fresh(tenant_id, "raised")
    assert (raised.decision, raised.budget_held, checks.unexpected) == (Decision.ALLOW, True, 2)
    async with sessions.begin() as s:
        await s.execute(delete(Budget).where(Budget.tenant_id == tenant_id))
    free, trips = await checks.fresh(tenant_id, "removed")
    assert (free.decision, free.budget_held, checks.unexpected) == (Decision.ALLOW, False, 3)
    _, trips = await checks.fresh(tenant_id, "free")
    assert (trips, checks.unexpected) == (1, 3)
    written = await _written(sessions, tenant_id)
    assert (written["decisions"], written["holds"]) == (6, 2)


async def test_a_key_another_execution_holds_is_busy_or_its_hit(
    tenant_id: str,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warm worker's check of a key another execution holds does not take the key: it is
    busy, as on a cold worker, and records nothing."""
    checks = Checks(app_sessions, monkeypatch)
    await checks.fresh(tenant_id, "held")
    before = await _written(sessions, tenant_id)
    other = str(uuid7())
    with pytest.raises(ApplicationError) as raised:
        await checks.run(_input(tenant_id, "held", other))
    assert raised.value.type == ErrorCode.IDEMPOTENCY_KEY_BUSY
    assert checks.unexpected == 1
    assert await _written(sessions, tenant_id) == before


async def test_checks_of_others_are_not_decided_ahead(
    tenant_id: str,
    app_sessions: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dry run, a tenant the worker has not checked, a capability it has not checked for
    the tenant, and a call a strict policy makes wait: each read first. A worker remembers
    at most ``EXPECTED_TENANTS`` tenants, the oldest forgotten first."""
    checks = Checks(app_sessions, monkeypatch)
    await checks.fresh(tenant_id, "warm")
    expected = checks.step._expected
    dry = _input(tenant_id, "dry", str(uuid7())).model_copy(update={"dry_run": True})
    assert expected.of(dry) is None
    assert expected.of(_input(f"{tenant_id}-other", "k", str(uuid7()))) is None
    other_capability = _input(tenant_id, "k", str(uuid7()))
    assert ECHO is not None
    other_capability = other_capability.model_copy(
        update={"capability": ECHO.model_copy(update={"id": "demo.other"})}
    )
    assert expected.of(other_capability) is None
    assert expected.of(_input(tenant_id, "k", str(uuid7()))) is not None
    opened = expected._tenants[tenant_id]
    for i in range(EXPECTED_TENANTS - 1):
        expected._tenants[f"t{i}"] = opened
    last = _opened_like(expected, tenant_id)
    expected.learn(_input("t-last", "k", str(uuid7())), last)
    assert len(expected._tenants) == EXPECTED_TENANTS
    assert tenant_id not in expected._tenants and "t-last" in expected._tenants


def _opened_like(expected: Any, tenant_id: str) -> Any:
    from activities.execute.policy import Budgeted, _Opened

    tenant, document = expected._tenants[tenant_id]
    return _Opened(tenant, document, None, Budgeted(None))
