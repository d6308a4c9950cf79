"""Repeats answered from the gateway's memory keep every rule of a hit from Postgres: the
same receipt and kept output, ``Idempotent-Replayed``, ``idempotency_key_reused`` for
another input, the key's and the output's expiry, tenant isolation and hit counting; and a
verified API key is trusted only for a bounded time after a revocation."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.names import REPLAYED_HEADER
from starter.devstack import serve_asgi
from starter.gateway.app import create_app
from starter.gateway.deps import Deps
from starter.service import tenants
from starter.service.executions.keycache import KeyCache
from store import idempotency, tenancy
from store.models import ExecutionOutputRow
from tests.support.stack import ADMIN_KEY, Stack

BODY: dict[str, Any] = {"schema_version": "1", "capability_id": "demo.echo", "input": {"m": 1}}


class NoPostgres:
    """Stands in for the gateway's sessions: any use fails the test."""

    def begin(self) -> Any:
        raise AssertionError("the answer asked Postgres")

    def __call__(self) -> Any:
        raise AssertionError("the answer asked Postgres")


@asynccontextmanager
async def gateway(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[tuple[str, Deps, httpx.AsyncClient]]:
    """A gateway of its own (its memory starts empty) on the stack's Temporal and worker;
    its hit counters reach Postgres only at shutdown."""
    settings = stack.settings.model_copy(update={"hit_flush_seconds": 3600.0})
    app = create_app(settings, client=stack.client, sessions=app_sessions)
    async with serve_asgi(app) as url, httpx.AsyncClient(timeout=60) as http:
        yield url, app.state.deps, http


def _headers(api_key: str, key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}


async def test_a_repeat_from_memory_keeps_every_rule_of_a_hit(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    first = await stack.execute("demo.echo", BODY["input"], key="remembered")
    assert first.status_code == 200, first.text
    receipt_id = first.json()["receipt_id"]
    async with gateway(stack, app_sessions) as (url, deps, http):
        post = f"{url}/v1/executions"
        headers = _headers(stack.api_key, "remembered")
        from_postgres = await http.post(post, json=BODY, headers=headers)
        assert from_postgres.status_code == 200, from_postgres.text

        # Kept until the earlier of the key's and the kept output's expiry.
        kept = deps.executions.answers.get(stack.tenant_id, "remembered", datetime.now(UTC))
        assert kept is not None
        async with tenancy.tenant_transaction(app_sessions, stack.tenant_id) as session:
            claim = await idempotency.find_claim_by_receipt(session, stack.tenant_id, receipt_id)
            output = await session.get(ExecutionOutputRow, receipt_id)
        assert claim is not None and output is not None
        assert kept.until == min(claim.expires_at, output.expires_at)

        sessions, deps.sessions = deps.sessions, NoPostgres()  # type: ignore[assignment]
        for _ in range(2):
            again = await http.post(post, json=BODY, headers=headers)
            assert again.status_code == 200, again.text
            assert again.headers[REPLAYED_HEADER] == "true"
            assert again.content == from_postgres.content
            assert again.json()["output"] == first.json()["output"]
        other = {**BODY, "input": {"m": 2}}
        reused = await http.post(post, json=other, headers=headers)
        assert reused.status_code == 422
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        # One hit from Postgres, two from memory, counted alike.
        assert deps.executions.hits.pending == 3

        # Past its expiry the answer is Postgres's again.
        kept.until = datetime.now(UTC) - timedelta(seconds=1)
        deps.sessions = sessions
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 200
        assert deps.executions.answers.get(stack.tenant_id, "remembered", datetime.now(UTC))

        # Another tenant with the same key and input gets an execution of its own.
        _, other_key = await stack.new_tenant()
        theirs = await http.post(post, json=BODY, headers=_headers(other_key, "remembered"))
        assert theirs.status_code == 200, theirs.text
        assert REPLAYED_HEADER not in theirs.headers
        assert theirs.json()["receipt_id"] != receipt_id


async def test_a_revoked_key_is_refused_within_the_bound(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant_id, api_key = await stack.new_tenant()
    first = await stack.execute("demo.echo", BODY["input"], key="revoked", api_key=api_key)
    assert first.status_code == 200, first.text
    key_id = api_key.split("_")[1]
    now = [0.0]
    async with gateway(stack, app_sessions) as (url, deps, http):
        deps.keys = KeyCache(1.0, clock=lambda: now[0])
        post = f"{url}/v1/executions"
        headers = _headers(api_key, "revoked")
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 200
        # Revoked elsewhere (another gateway, the CLI): this gateway trusts the key for the
        # repeats it answers from memory at most 1 s (its clock) after it verified it.
        async with stack.sessions.begin() as session:
            assert await tenants.revoke_key(session, key_id, datetime.now(UTC))
        now[0] = 0.999
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 200
        # Anything Postgres answers checks the key there at once.
        fresh = await http.post(post, json=BODY, headers=_headers(api_key, "another"))
        assert fresh.status_code == 401
        now[0] = 1.0
        refused = await http.post(post, json=BODY, headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthenticated"

        # Revoked through this gateway: forgotten at once.
        _, second = await stack.new_tenant()
        headers = _headers(second, "revoked")
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 200
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 200
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        second_id = second.split("_")[1]
        revoked = await http.post(f"{url}/v1/admin/keys/{second_id}/revoke", headers=admin)
        assert revoked.status_code == 200, revoked.text
        assert (await http.post(post, json=BODY, headers=headers)).status_code == 401
    assert tenant_id


async def test_copies_behind_the_first_cost_no_database_round_trip(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    copies = 20
    async with gateway(stack, app_sessions) as (url, deps, http):
        # The first copy's run waits until every copy is in: none can come too late to share.
        release = asyncio.Event()
        entered = 0
        share, run = deps.flights.share, deps.executions.run

        async def counted_share(*args: Any, **kwargs: Any) -> Any:
            nonlocal entered
            entered += 1
            if entered == copies:
                release.set()
            return await share(*args, **kwargs)

        async def held_run(*args: Any, **kwargs: Any) -> Any:
            await release.wait()
            return await run(*args, **kwargs)

        transactions = 0

        class Counted:
            def begin(self) -> Any:
                nonlocal transactions
                transactions += 1
                return app_sessions.begin()

        deps.flights.share = counted_share  # type: ignore[method-assign]
        deps.executions.run = held_run  # type: ignore[method-assign]
        deps.sessions = Counted()  # type: ignore[assignment]
        # A key this gateway has not seen: the copies share the first one's authentication.
        headers = _headers(stack.api_key, f"burst-{uuid.uuid4().hex}")
        answers = await asyncio.gather(
            *(http.post(f"{url}/v1/executions", json=BODY, headers=headers) for _ in range(copies))
        )
    assert [a.status_code for a in answers] == [200] * copies
    assert len({a.json()["receipt_id"] for a in answers}) == 1
    # Every copy waited for the one run: none of them is a replay.
    assert not any(REPLAYED_HEADER in a.headers for a in answers)
    assert transactions == 1
