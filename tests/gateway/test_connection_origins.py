"""Through the gateway: an ``http_bearer`` connection's token goes only to the origins the
connection names. The reproduction: both providers are allow-listed, the connection's
``base_url`` is one of them and the agent's input names the other; the run fails ``403
connection_origin_mismatch`` with a failed receipt, and the other provider never hears of
it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from starter.devstack.processes import serve_asgi
from tests.support.fakes import FakeProvider
from tests.support.stack import ADMIN_KEY, Stack, StackFactory

TOKEN = "tok-" + "b0und" * 8


@pytest_asyncio.fixture(loop_scope="session")
async def other() -> AsyncIterator[FakeProvider]:
    fake = FakeProvider()
    async with serve_asgi(fake) as url:
        fake.base_url = url
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def two(
    make_stack: StackFactory, provider: FakeProvider, other: FakeProvider
) -> AsyncIterator[Stack]:
    async with make_stack(http_allow_hosts=[provider.allow_entry, other.allow_entry]) as s:
        yield s


def _authorizations(fake: FakeProvider) -> list[str]:
    return [v for c in fake.calls for k, v in c.raw_headers if k.lower() == "authorization"]


async def test_the_token_goes_only_to_the_connections_origin(
    two: Stack, provider: FakeProvider, other: FakeProvider
) -> None:
    stack = two
    connection_id = await stack.add_connection(
        "http_bearer", TOKEN, config={"base_url": f"{provider.base_url}/v2"}
    )
    stolen = other.script("/collect")
    refused = await stack.execute(
        "http.request", {"method": "POST", "url": stolen}, connection_id=connection_id
    )
    assert refused.status_code == 403, refused.text
    envelope = refused.json()
    assert envelope["error"]["code"] == "connection_origin_mismatch"
    assert envelope["receipt"]["status"] == "failure"
    assert envelope["receipt"]["error_code"] == "connection_origin_mismatch"
    assert other.calls == [] and _authorizations(other) == []
    assert TOKEN not in refused.text

    # The connection's own origin still gets it.
    own = provider.script("/v2/ok")
    sent = await stack.execute(
        "http.request", {"method": "POST", "url": own}, connection_id=connection_id
    )
    assert sent.status_code == 200, sent.text
    assert _authorizations(provider) == [f"Bearer {TOKEN}"] and other.calls == []


async def test_allowed_origins_with_two_origins_reach_both(
    two: Stack, provider: FakeProvider, other: FakeProvider
) -> None:
    stack = two
    origins = [provider.base_url, other.base_url + "/"]
    connection_id = await stack.add_connection(
        "http_bearer", TOKEN, config={"allowed_origins": origins}
    )
    for fake in (provider, other):
        done = await stack.execute(
            "http.request",
            {"method": "GET", "url": fake.script("/both")},
            connection_id=connection_id,
        )
        assert done.status_code == 200, done.text
        assert _authorizations(fake)[-1] == f"Bearer {TOKEN}"


async def test_a_connection_naming_no_origin_is_refused_at_creation(two: Stack) -> None:
    for config in ({}, {"allowed_origins": ["https://api.example.com/v1"]}):
        made = await two.http.post(
            f"{two.url}/v1/admin/tenants/{two.tenant_id}/connections",
            json={"type": "http_bearer", "name": "x", "secret": TOKEN, "config": config},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert made.status_code == 400, made.text
        assert made.json()["error"]["code"] == "schema_validation_failed"
        assert TOKEN not in made.text


async def test_github_names_that_change_the_path_are_refused_at_ingest(two: Stack) -> None:
    connection_id = await two.add_connection("github", "ghp_" + "x" * 36)
    for owner, repo in (("..", "r"), ("moat", ".."), ("moat", "."), ("a/b", "r"), ("m", "a%2f")):
        refused = await two.execute(
            "github.create_issue",
            {"owner": owner, "repo": repo, "title": "t"},
            connection_id=connection_id,
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "schema_validation_failed"
