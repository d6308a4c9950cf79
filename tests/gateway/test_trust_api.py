"""The synthetic prober on its schedule against a fake provider (no budget touched, only
the synthetic half of the scores moves), and the trust and probe routes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.names import TRUST_REFRESH_WORKFLOW
from schemas.probes import TrustRefreshInput
from starter.devstack.providers import FakeSlack
from starter.runtime.schedules import ensure_trust_schedule, probe_schedule_id
from store import budgets
from store.models import BudgetUsage, OrchestrationEvent, ReceiptRow
from tests.support.fakes import FakeProvider
from tests.support.stack import ADMIN_KEY, Stack, StackFactory


async def refresh(stack: Stack) -> None:
    await stack.client.execute_workflow(
        TRUST_REFRESH_WORKFLOW,
        TrustRefreshInput(tenant_id=stack.tenant_id),
        id=f"refresh-{uuid.uuid4().hex}",
        task_queue=stack.settings.task_queue,
    )


def auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.api_key}"}


async def _receipts(s: AsyncSession, tenant_id: str, at_least: int) -> Sequence[ReceiptRow]:
    """The tenant's receipts, once there are ``at_least`` (the probe runs record them)."""
    while True:
        rows = (await s.execute(select(ReceiptRow).filter_by(tenant_id=tenant_id))).scalars().all()
        if len(rows) >= at_least:
            return rows
        await asyncio.sleep(0.2)
        await s.rollback()


async def test_the_prober_runs_on_its_schedule_and_touches_no_budget(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    async with make_stack(
        http_allow_hosts=[provider.allow_entry], probe_min_interval_seconds=1
    ) as stack:
        # A budget of nothing: a real call would be denied, a probe is not counted.
        async with stack.sessions.begin() as session:
            await budgets.set_budget(session, stack.tenant_id, "http.request", 0, "day")
        url = provider.script("/health")
        body: dict[str, Any] = {
            "capability_id": "http.request",
            "input": {"method": "GET", "url": url},
            "interval_seconds": 1,
        }
        added = await stack.http.post(f"{stack.url}/v1/probes", json=body, headers=auth(stack))
        assert added.status_code == 201, added.text
        probe = added.json()
        assert probe["schedule_id"] == probe_schedule_id(probe["id"])
        for _ in range(600):  # the schedule fires every second
            if len(provider.calls_to("/health")) >= 2:
                break
            await asyncio.sleep(0.2)
        paused = await stack.http.post(
            f"{stack.url}/v1/probes/{probe['id']}/pause", headers=auth(stack)
        )
        assert paused.status_code == 200 and paused.json()["paused"] is True
        assert (
            await stack.client.get_schedule_handle(probe["schedule_id"]).describe()
        ).schedule.state.paused
        # Wait for the runs already started to record.
        async with stack.sessions() as s:
            rows = await _receipts(s, stack.tenant_id, at_least=2)
            assert all(r.is_synthetic and r.status == "success" for r in rows)
            used = await s.execute(
                select(func.count()).select_from(BudgetUsage).filter_by(tenant_id=stack.tenant_id)
            )
            assert used.scalar_one() == 0
            started = (
                (
                    await s.execute(
                        select(OrchestrationEvent.event_data).filter_by(
                            tenant_id=stack.tenant_id, event_type="RUN_STARTED"
                        )
                    )
                )
                .scalars()
                .all()
            )
            assert started and all(data.get("is_synthetic") is True for data in started)
        # Probes go through the gateway's usual path: the key is the scheduled run's.
        assert all(c.headers.get("idempotency-key") for c in provider.calls_to("/health"))

        await refresh(stack)
        scores = await stack.http.get(
            f"{stack.url}/v1/capabilities/http.request/trust?window=1h", headers=auth(stack)
        )
        assert scores.status_code == 200, scores.text
        (entry,) = scores.json()["scores"]
        assert entry["real"]["samples"] == 0
        assert entry["synthetic"]["samples"] >= 2
        # Below the minimum samples: no rate, and the reason.
        assert entry["synthetic"]["success_rate"] is None
        assert entry["synthetic"]["reason"].startswith("too_few_samples")

        listed = await stack.http.get(f"{stack.url}/v1/probes", headers=auth(stack))
        assert [p["id"] for p in listed.json()["items"]] == [probe["id"]]
        gone = await stack.http.delete(f"{stack.url}/v1/probes/{probe['id']}", headers=auth(stack))
        assert gone.status_code == 204
        after = await stack.http.get(f"{stack.url}/v1/probes", headers=auth(stack))
        assert after.json() == {"items": [], "next_cursor": None}


async def test_a_slack_connection_is_probed_with_auth_test_on_its_schedule(
    make_stack: StackFactory,
) -> None:
    token = f"xoxb-probe-{uuid.uuid4().hex}"
    with FakeSlack() as slack:
        async with make_stack(
            http_allow_hosts=[slack.allow_entry], probe_min_interval_seconds=1
        ) as stack:
            async with stack.sessions.begin() as session:
                await budgets.set_budget(session, stack.tenant_id, "slack.auth_test", 0, "day")
            connection_id = await stack.add_connection(
                "slack", token, config={"base_url": f"{slack.base_url}/api"}
            )
            # No input: the catalog's default (`{}`) is what auth.test takes.
            body = {
                "capability_id": "slack.auth_test",
                "connection_id": connection_id,
                "interval_seconds": 1,
            }
            added = await stack.http.post(f"{stack.url}/v1/probes", json=body, headers=auth(stack))
            assert added.status_code == 201, added.text
            probe = added.json()
            for _ in range(600):  # the schedule fires every second
                if len(slack.calls("auth.test")) >= 2:
                    break
                await asyncio.sleep(0.2)
            paused = await stack.http.post(
                f"{stack.url}/v1/probes/{probe['id']}/pause", headers=auth(stack)
            )
            assert paused.status_code == 200
            async with stack.sessions() as s:
                rows = await _receipts(s, stack.tenant_id, at_least=2)
                assert all(
                    (r.is_synthetic, r.status, r.capability_id)
                    == (True, "success", "slack.auth_test")
                    for r in rows
                )
                used = await s.execute(
                    select(func.count())
                    .select_from(BudgetUsage)
                    .filter_by(tenant_id=stack.tenant_id)
                )
                assert used.scalar_one() == 0
            # The connection's token reached Slack, and only auth.test was called.
            calls = slack.requests
            assert calls and all(c.path == "/api/auth.test" for c in calls)
            assert all(c.headers["authorization"] == f"Bearer {token}" for c in calls)
            # The same call made by an agent is counted, and the budget of nothing denies it.
            denied = await stack.execute("slack.auth_test", {}, connection_id=connection_id)
            assert denied.status_code == 403, denied.text
            assert denied.json()["error"]["code"] == "budget_exceeded"

            await refresh(stack)
            scores = await stack.http.get(
                f"{stack.url}/v1/capabilities/slack.auth_test/trust?window=1h",
                headers=auth(stack),
            )
            (entry,) = scores.json()["scores"]
            assert entry["synthetic"]["samples"] >= 2
            gone = await stack.http.delete(
                f"{stack.url}/v1/probes/{probe['id']}", headers=auth(stack)
            )
            assert gone.status_code == 204


async def test_only_safe_probes_and_the_trust_routes(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/write")
    refused = await stack.http.post(
        f"{stack.url}/v1/probes",
        json={"capability_id": "http.request", "input": {"method": "POST", "url": url}},
        headers=auth(stack),
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "capability_not_probeable"
    secret = await stack.http.post(
        f"{stack.url}/v1/probes",
        json={
            "capability_id": "http.request",
            "input": {"method": "GET", "url": url, "headers": {"Authorization": "Bearer x"}},
            "interval_seconds": 60,
        },
        headers=auth(stack),
    )
    assert secret.status_code == 400
    assert "connection" in secret.json()["error"]["message"]
    assert provider.calls_to("/write") == []

    for i in range(3):
        assert (await stack.execute("demo.echo", {"i": i})).status_code == 200
    await refresh(stack)
    mine = await stack.http.get(f"{stack.url}/v1/trust?window=1h", headers=auth(stack))
    assert mine.status_code == 200
    (echo,) = mine.json()["scores"]
    assert echo["capability_id"] == "demo.echo" and echo["real"]["samples"] == 3
    assert echo["synthetic"]["samples"] == 0

    unknown = await stack.http.get(f"{stack.url}/v1/capabilities/nope/trust", headers=auth(stack))
    assert unknown.status_code == 404
    as_tenant = await stack.http.get(f"{stack.url}/v1/admin/trust", headers=auth(stack))
    assert as_tenant.status_code == 403
    admin = await stack.http.get(
        f"{stack.url}/v1/admin/trust?window=1h&capability_id=demo.echo",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert admin.status_code == 200
    (platform,) = admin.json()["scores"]
    assert platform["real"]["samples"] >= 3

    schedule_id = await ensure_trust_schedule(stack.client, stack.settings)
    assert await ensure_trust_schedule(stack.client, stack.settings) == schedule_id
    await stack.client.get_schedule_handle(schedule_id).delete()


async def test_a_probe_input_no_execution_could_take_is_refused(stack: Stack) -> None:
    """Every run of a probe hashes its input's RFC 8785 form, as an execute request's: an
    integer beyond ±(2^53 - 1) would fail each one, so the probe is refused at creation,
    as the API's schema says."""
    refused = await stack.http.post(
        f"{stack.url}/v1/probes",
        json={"capability_id": "demo.echo", "input": {"n": [2**53]}},
        headers=auth(stack),
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "schema_validation_failed"
    assert "RFC 8785" in refused.json()["error"]["message"]
    listed = await stack.http.get(f"{stack.url}/v1/probes", headers=auth(stack))
    assert listed.json()["items"] == []
