"""A key's first repeat on a gateway, of a key it verified moments ago, is read in one
statement on a held connection (``store.held``). It answers the same bytes as a repeat
read in a transaction and as one from memory, and keeps every rule of a hit: another
input is ``idempotency_key_reused``, another tenant's key never sees it, and a key revoked
since gets its stored answers within the key cache's bound, as from memory, but starts no
run: the same statement authenticates it when its key holds no recorded receipt, and once
found revoked it is trusted no longer."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.names import REPLAYED_HEADER
from starter.devstack import serve_asgi
from starter.gateway.app import create_app
from starter.service import tenants
from starter.service.executions.keycache import KeyCache
from tests.gateway.test_memory_answers import gateway
from tests.support.stack import Stack


def _body(m: int) -> dict[str, Any]:
    return {"schema_version": "1", "capability_id": "demo.echo", "input": {"m": m}}


def _headers(api_key: str, key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}


async def test_a_first_repeat_read_held_answers_as_a_transaction_and_memory_do(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    keys = [f"held-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    for i, key in enumerate(keys):
        assert (await stack.execute("demo.echo", {"m": i}, key=key)).status_code == 200
    answers: dict[str, list[bytes]] = {}
    for held in (False, True):
        async with gateway(stack, app_sessions) as (url, deps, http):
            post = f"{url}/v1/executions"
            if not held:  # nothing verified moments ago: every read is a transaction's
                deps.keys = KeyCache(0)
            reads = deps.executions.reads
            assert reads is not None
            read, counted = reads.read, []

            async def counting(*args: Any, read: Any = read, counted: list[int] = counted) -> Any:
                counted.append(1)
                return await read(*args)

            # The stack's key, verified by a request of its own first. Its run may outlast
            # the wait's first look (0.2 s), which reads the policy's mode held: the reads
            # counted are the first repeats' only.
            warm = await http.post(post, json=_body(99), headers=_headers(stack.api_key, "warm"))
            assert warm.status_code == 200, warm.text
            reads.read = counting  # type: ignore[method-assign]
            for i, key in enumerate(keys):
                headers = _headers(stack.api_key, key)
                first = await http.post(post, json=_body(i), headers=headers)
                assert first.status_code == 200, first.text
                assert first.headers[REPLAYED_HEADER] == "true"
                again = await http.post(post, json=_body(i), headers=headers)
                assert again.content == first.content  # from memory: the same bytes
                answers.setdefault(key, []).append(first.content)
            assert len(counted) == (len(keys) if held else 0)
    for key in keys:
        transaction, held_read = answers[key]
        assert held_read == transaction


async def test_a_first_repeat_read_held_keeps_every_rule_of_a_hit(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    key = f"rules-{uuid.uuid4().hex[:8]}"
    first = await stack.execute("demo.echo", {"m": 1}, key=key)
    assert first.status_code == 200, first.text
    other_tenant, other_key = await stack.new_tenant()
    async with gateway(stack, app_sessions) as (url, deps, http):
        post = f"{url}/v1/executions"
        for api_key in (stack.api_key, other_key):  # both keys verified moments ago
            warm = await http.post(post, json=_body(7), headers=_headers(api_key, "warm"))
            assert warm.status_code == 200, warm.text
        assert deps.keys.get(stack.api_key) and deps.keys.get(other_key)

        # Another input under the key, on its first repeat.
        reused = await http.post(post, json=_body(2), headers=_headers(stack.api_key, key))
        assert reused.status_code == 422, reused.text
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        assert deps.executions.answers.get(stack.tenant_id, key, datetime.now(UTC)) is None

        # Another tenant's key with the same key and input: an execution of its own.
        theirs = await http.post(post, json=_body(1), headers=_headers(other_key, key))
        assert theirs.status_code == 200, theirs.text
        assert REPLAYED_HEADER not in theirs.headers
        assert theirs.json()["receipt_id"] != first.json()["receipt_id"]

        # Revoked elsewhere: within the bound a stored answer is still replayed, from
        # Postgres as from memory, but a run is not started: the key is checked at once.
        stored = await stack.execute("demo.echo", {"m": 3}, key=f"{key}-later", api_key=other_key)
        assert stored.status_code == 200, stored.text
        async with stack.sessions.begin() as session:
            assert await tenants.revoke_key(session, other_key.split("_")[1], datetime.now(UTC))
        assert deps.keys.get(other_key) is not None  # still verified moments ago
        replayed = await http.post(post, json=_body(3), headers=_headers(other_key, f"{key}-later"))
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["receipt_id"] == stored.json()["receipt_id"]
        refused = await http.post(post, json=_body(4), headers=_headers(other_key, f"{key}-new"))
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthenticated"
        # Found revoked, the key is trusted no longer: its stored answers are refused too.
        assert deps.keys.get(other_key) is None
        again = await http.post(post, json=_body(3), headers=_headers(other_key, f"{key}-later"))
        assert again.status_code == 401, again.text

        # The stack's own first repeat, read after the other tenant's on the same held
        # connection, is its own answer.
        mine = await http.post(post, json=_body(1), headers=_headers(stack.api_key, key))
        assert mine.status_code == 200, mine.text
        assert mine.headers[REPLAYED_HEADER] == "true"
        assert mine.json()["receipt_id"] == first.json()["receipt_id"]
    assert other_tenant


async def test_held_reads_off_answers_first_repeats_in_a_transaction(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """``held_reads=0`` (behind a pooler in transaction mode): no connection is held, and
    a verified key's first repeat is answered all the same, by a transaction."""
    key = f"unheld-{uuid.uuid4().hex[:8]}"
    assert (await stack.execute("demo.echo", {"m": 7}, key=key)).status_code == 200
    settings = stack.settings.model_copy(update={"held_reads": 0, "hit_flush_seconds": 3600.0})
    app = create_app(settings, client=stack.client, sessions=app_sessions)
    async with serve_asgi(app) as url, httpx.AsyncClient(timeout=60) as http:
        assert app.state.deps.executions.reads is None
        post = f"{url}/v1/executions"
        warm = await http.post(post, json=_body(98), headers=_headers(stack.api_key, "warm-0"))
        assert warm.status_code == 200, warm.text
        first = await http.post(post, json=_body(7), headers=_headers(stack.api_key, key))
        assert first.status_code == 200, first.text
        assert first.headers[REPLAYED_HEADER] == "true"
