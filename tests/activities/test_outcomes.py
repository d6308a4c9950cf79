"""Provider outcomes: taxonomy, retries, Retry-After, cached failures, budgets, SSRF guard."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from store import budgets
from store.models import (
    BudgetHold,
    IdempotencyClaim,
    OutcomeEventRow,
    PolicyDecisionRow,
    ReceiptRow,
)
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import CATALOG, Stack, StackFactory


def post(url: str, **extra: Any) -> dict[str, Any]:
    return {"method": "POST", "url": url, "json": {"text": "hello"}, **extra}


@pytest.mark.parametrize(
    ("status", "taxonomy", "calls"),
    [
        (400, "provider_invalid_input", 1),
        (401, "provider_auth_failure", 1),
        (403, "provider_auth_failure", 1),
        (404, "provider_not_found", 1),
        (409, "provider_invalid_input", 1),  # a conflict on the first attempt is final
        (422, "provider_invalid_input", 1),
        (429, "provider_rate_limited", 3),
        (500, "provider_server_error", 3),
        (503, "provider_server_error", 3),
    ],
)
async def test_taxonomy_and_retries(
    fast: Stack, provider: FakeProvider, status: int, taxonomy: str, calls: int
) -> None:
    url = provider.script(f"/s{status}", Step(status, {"error": "nope"}))
    response = await fast.execute("test.http", post(url), key=f"k{status}")
    assert response.status_code == 502, response.text
    body = response.json()
    assert body["status"] == "failed"
    assert body["error"]["code"] == taxonomy
    assert body["error"]["details"]["provider_status"] == status
    assert body["receipt"]["status"] == "failure"
    assert body["receipt"]["http_status"] == status
    assert len(provider.calls_to(f"/s{status}")) == calls  # 4xx not retried; 1 + 2 retries
    async with fast.sessions() as s:
        tax = (
            await s.execute(
                select(OutcomeEventRow.error_taxonomy).filter_by(receipt_id=body["receipt_id"])
            )
        ).scalar_one()
    assert tax == taxonomy


async def test_timeout_is_classified(fast: Stack, provider: FakeProvider) -> None:
    # Slower than all three attempts together (1 s timeout each, backoff between them).
    url = provider.script("/slow", Step(200, delay=8.0))
    response = await fast.execute("test.http", post(url), key="slow")
    assert response.status_code == 502, response.text
    body = response.json()
    assert body["error"]["code"] == "timeout"
    assert body["receipt"]["status"] == "timeout"
    assert body["receipt"]["output_hash"] is None


async def test_timed_out_call_finished_by_the_provider_is_not_repeated(
    fast: Stack, provider: FakeProvider
) -> None:
    # The first attempt times out on our side but the provider finishes it; the retry
    # carries the same Idempotency-Key and gets the stored result: one effect, a success.
    url = provider.script("/late", Step(200, {"done": True}, delay=1.5))
    response = await fast.execute("test.http.patient", post(url), key="late")
    assert response.status_code == 200, response.text
    calls = provider.calls_to("/late")
    assert len(calls) >= 2
    assert len({c.headers["idempotency-key"] for c in calls}) == 1
    assert len(provider.effects_on("/late")) == 1


async def test_retry_that_finds_the_provider_still_at_work_waits_for_it(
    fast: Stack, provider: FakeProvider
) -> None:
    # The provider is still processing the timed-out first attempt when the retries arrive;
    # it answers them 409 (IETF Idempotency-Key draft). Those 409s are retried, not final,
    # and once the provider has finished, the next retry gets the original's result.
    url = provider.script("/busy", Step(200, {"done": True}, delay=4.0))
    response = await fast.execute("test.http.patient", post(url), key="busy")
    assert response.status_code == 200, response.text
    assert response.json()["receipt"]["status"] == "success"
    statuses = provider.statuses("/busy")
    assert statuses[0] == 200  # the original, answered after we stopped waiting
    assert 409 in statuses[1:], statuses
    assert statuses[-1] == 200, statuses
    assert len(provider.effects_on("/busy")) == 1
    events = await fast.http.get(
        f"{fast.url}/v1/executions/{response.json()['receipt_id']}/events",
        headers={"Authorization": f"Bearer {fast.api_key}"},
    )
    retrying = [e for e in events.json() if e["event_type"] == "EFFECT_RETRYING"]
    assert 409 in {e["event_data"]["http_status"] for e in retrying}


async def test_network_error_is_classified(make_stack: StackFactory) -> None:
    from starter.devstack import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/nothing-listens"
    async with make_stack(catalog=CATALOG, http_allow_hosts=[f"127.0.0.1:{port}"]) as fast:
        response = await fast.execute("test.http", post(url), key="net")
    assert response.json()["error"]["code"] == "network_error"


async def test_retry_then_success(fast: Stack, provider: FakeProvider) -> None:
    url = provider.script("/flaky", Step(500), Step(502), Step(200, {"done": True}))
    response = await fast.execute("test.http", post(url), key="flaky")
    assert response.status_code == 200, response.text
    calls = provider.calls_to("/flaky")
    assert len(calls) == 3
    # Every retry carries the same downstream Idempotency-Key.
    assert len({c.headers["idempotency-key"] for c in calls}) == 1


async def test_retry_after_is_honoured(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/limited", Step(429, headers={"Retry-After": "2"}), Step(200))
    response = await stack.execute("http.request", post(url), key="ra")
    assert response.status_code == 200, response.text
    first, second = provider.calls_to("/limited")
    # http.request's own backoff would retry after 1 s; Retry-After asks for 2 s.
    assert second.at - first.at >= 1.9


async def test_failure_receipt_is_cached(fast: Stack, provider: FakeProvider) -> None:
    url = provider.script("/gone", Step(404))
    first = await fast.execute("test.http", post(url), key="cached-failure")
    assert first.status_code == 502
    provider.script("/gone", Step(200))
    again = await fast.execute("test.http", post(url), key="cached-failure")
    assert again.status_code == 502
    assert again.headers["x-moat-idempotent-replayed"] == "true"
    assert again.json()["receipt"] == first.json()["receipt"]
    assert len(provider.calls_to("/gone")) == 1


async def test_key_reuse_with_other_input_is_422(stack: Stack) -> None:
    first = await stack.execute("demo.echo", {"n": 1}, key="reused")
    assert first.status_code == 200
    other = await stack.execute("demo.echo", {"n": 2}, key="reused")
    assert other.status_code == 422
    body = other.json()
    assert body["error"]["code"] == "idempotency_key_reused"
    assert body["error"]["details"]["original_receipt_id"] == first.json()["receipt_id"]
    async with stack.sessions() as s:
        n = (
            await s.execute(
                select(func.count()).select_from(ReceiptRow).filter_by(tenant_id=stack.tenant_id)
            )
        ).scalar_one()
    assert n == 1


async def test_after_ttl_a_new_execution_gets_a_new_receipt(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script("/ttl", Step(200))
    first = await stack.execute("http.request", post(url), key="ttl")
    assert first.status_code == 200
    # Let the 24 h window pass: move the claim's expiry into the past.
    async with stack.sessions.begin() as s:
        await s.execute(
            update(IdempotencyClaim)
            .filter_by(tenant_id=stack.tenant_id, idempotency_key="ttl")
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    second = await stack.execute("http.request", post(url), key="ttl")
    assert second.status_code == 200, second.text
    assert "x-moat-idempotent-replayed" not in second.headers
    assert second.json()["receipt_id"] != first.json()["receipt_id"]
    effects = provider.effects_on("/ttl")
    assert len(effects) == 2
    assert effects[0].headers["idempotency-key"] != effects[1].headers["idempotency-key"]
    # The old receipt is untouched and still readable.
    old = await stack.http.get(
        f"{stack.url}/v1/receipts/{first.json()['receipt_id']}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert old.json() == first.json()["receipt"]


async def test_budget_exhausted_is_policy_denied(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/billed", Step(200))
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "http.request", 1, "day")
    ok = await stack.execute("http.request", post(url), key="b1")
    assert ok.status_code == 200
    repeat = await stack.execute("http.request", post(url), key="b1")
    assert repeat.status_code == 200  # an idempotent hit costs nothing
    denied = await stack.execute("http.request", post(url), key="b2")
    assert denied.status_code == 403, denied.text
    body = denied.json()
    assert body["error"]["code"] == "budget_exceeded"
    assert body["receipt"]["status"] == "policy_denied"
    assert len(provider.calls_to("/billed")) == 1
    async with stack.sessions() as s:
        state = await budgets.budget_state(s, stack.tenant_id, "http.request", datetime.now(UTC))
        rule = (
            await s.execute(
                select(PolicyDecisionRow.rule_hit).filter_by(
                    id=body["receipt"]["policy_decision_id"]
                )
            )
        ).scalar_one()
    assert state is not None and (state.used, state.held) == (1, 0)
    assert rule == "BUDGET_EXCEEDED"


async def test_concurrent_executions_never_overshoot_the_budget(
    stack: Stack, provider: FakeProvider
) -> None:
    # 20 executions with different keys at once against a limit of 5: each allowed one
    # holds its unit while its provider call is in flight, so exactly 5 run.
    url = provider.script("/capped", Step(200, delay=0.5))
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, stack.tenant_id, "http.request", 5, "day")
    responses = await asyncio.gather(
        *(stack.execute("http.request", post(url), key=f"cap-{i}") for i in range(20))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 5 + [403] * 15, [r.text for r in responses if r.status_code >= 500]
    denied = [r.json() for r in responses if r.status_code == 403]
    assert {d["error"]["code"] for d in denied} == {"budget_exceeded"}
    assert len(provider.calls_to("/capped")) == 5
    async with stack.sessions() as s:
        state = await budgets.budget_state(s, stack.tenant_id, "http.request", datetime.now(UTC))
    assert state is not None and (state.used, state.held) == (5, 0)  # holds became uses


async def test_a_hold_left_by_an_ended_run_counts_until_it_expires(
    fast: Stack, provider: FakeProvider
) -> None:
    # A run terminated before recording leaves its hold: it counts while the run could
    # still be going, and is dropped once expired.
    url = provider.script("/held", Step(200))
    now = datetime.now(UTC)
    async with fast.sessions.begin() as s:
        await budgets.set_budget(s, fast.tenant_id, "test.http", 1, "day")
        state = await budgets.budget_state(s, fast.tenant_id, "test.http", now)
        assert state is not None
        await budgets.hold_budget(
            s, fast.tenant_id, "test.http", "ended-run", state, now + timedelta(minutes=5)
        )
    denied = await fast.execute("test.http", post(url), key="while-held")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "budget_exceeded"
    async with fast.sessions.begin() as s:
        await s.execute(
            update(BudgetHold)
            .filter_by(tenant_id=fast.tenant_id, receipt_id="ended-run")
            .values(expires_at=now - timedelta(seconds=1))
        )
    allowed = await fast.execute("test.http", post(url), key="after-expiry")
    assert allowed.status_code == 200, allowed.text
    async with fast.sessions() as s:
        left = (
            (await s.execute(select(BudgetHold.receipt_id).filter_by(tenant_id=fast.tenant_id)))
            .scalars()
            .all()
        )
    assert left == []  # the expired hold was dropped, the new one turned into a use


async def test_a_failed_execution_gives_its_unit_back(fast: Stack, provider: FakeProvider) -> None:
    url = provider.script("/refused", Step(400))
    async with fast.sessions.begin() as s:
        await budgets.set_budget(s, fast.tenant_id, "test.http", 1, "day")
    failed = await fast.execute("test.http", post(url), key="gives-back")
    assert failed.status_code == 502
    provider.script("/refused", Step(200))
    ok = await fast.execute("test.http", post(url), key="after-failure")
    assert ok.status_code == 200, ok.text


async def test_failures_do_not_consume_budget(fast: Stack, provider: FakeProvider) -> None:
    url = provider.script("/fails", Step(400))
    async with fast.sessions.begin() as s:
        await budgets.set_budget(s, fast.tenant_id, "test.http", 5, "month")
    await fast.execute("test.http", post(url), key="f1")
    await fast.execute("test.http", post(url), key="f2")
    async with fast.sessions() as s:
        state = await budgets.budget_state(s, fast.tenant_id, "test.http", datetime.now(UTC))
    assert state is not None and (state.used, state.held) == (0, 0)


async def test_loopback_is_refused_unless_allow_listed(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    url = provider.script("/private", Step(200))
    async with make_stack(http_allow_hosts=[]) as strict:
        for target in (url, url.replace("127.0.0.1", "localhost")):
            response = await strict.execute("http.request", post(target))
            assert response.status_code == 403, (target, response.text)
            assert response.json()["error"]["code"] == "host_not_allowed"
    assert provider.calls_to("/private") == []


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "0.0.0.0",
        "100.64.0.1",
    ],
)
async def test_guard_refuses_non_public_addresses(host: str) -> None:
    from temporalio.exceptions import ApplicationError

    from activities.adapters import HostGuard

    # Only name resolution happens here; nothing is sent anywhere.
    with pytest.raises(ApplicationError) as info:
        await HostGuard([]).check(host, 80)
    assert info.value.type == "host_not_allowed"
    assert info.value.non_retryable
    await HostGuard([host]).check(host, 80)  # allow-listed: passes
