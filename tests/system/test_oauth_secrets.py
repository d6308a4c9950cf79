"""An OAuth 2 connection through the whole stack (gateway, Temporal, worker) against a real
authorization server (authlib: refresh token rotation, reuse detection): 200 concurrent
executions on a connection whose access token has just expired refresh it exactly once and
all succeed; ``invalid_grant`` makes the next execution ``403 connection_needs_reauth``
without asking the provider; connecting again clears it; no token and no client secret
reaches any store (Postgres, Temporal's history on disk, manifests, logs, spans)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from starter.devstack import EmbeddedPostgres
from store import connection_tokens, tenancy
from store.connection_tokens import Minted
from store.keyrings.connections import ConnectionCipher
from tests.support.oauth_server import OAuthServer, Token
from tests.support.stack import Stack, StackFactory
from tests.system import test_secrets as secrets

CALLS = 200

temporal_on_disk = secrets.temporal_on_disk


@pytest.fixture(scope="module")
def server() -> Iterator[OAuthServer]:
    with OAuthServer() as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory,
    server: OAuthServer,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
) -> AsyncIterator[Stack]:
    allow = [server.url.removeprefix("http://")]
    async with make_stack(http_allow_hosts=allow, temporal_env=temporal_on_disk[0]) as s:
        yield s


async def _store(stack: Stack, connection_id: str, pair: Token) -> None:
    """The pair as connecting the account stored it."""
    cipher = ConnectionCipher.from_settings(stack.settings)
    expires_at = datetime.fromtimestamp(pair.expires_at, UTC)
    minted = Minted(pair.access_token, expires_at, pair.refresh_token)
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        await connection_tokens.store(session, cipher, stack.tenant_id, connection_id, minted)


async def test_200_executions_refresh_once_and_no_token_is_stored(
    stack: Stack,
    server: OAuthServer,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = server.add_client()
    pair = server.grant(client, "ada", expires_in=0)  # expired just now
    config = {"profile": "oidc", "client_id": client.client_id, "issuer": server.url}
    resource = {"method": "GET", "url": f"{server.url}/resource"}
    before = (server.counts.refreshes, server.counts.invalid_grant)
    with secrets.captured_logs(caplog) as json_lines, secrets.captured_spans() as spans:
        # The test server's own logger repeats what it issues: not Moat's.
        caplog.set_level(logging.WARNING, logger="authlib")
        con = await stack.add_connection(
            "oauth2", client.client_secret, config=config | {"base_url": server.url}
        )
        await _store(stack, con, pair)
        started = time.monotonic()
        runs = await asyncio.gather(
            *(
                stack.execute("http.request", resource, connection_id=con, key=f"k-{i}")
                for i in range(CALLS)
            )
        )
        wall = time.monotonic() - started
        refreshes = server.counts.refreshes - before[0]
        invalid_grant = server.counts.invalid_grant - before[1]
        # A reuse of a rotated refresh token (a leaked copy) revokes the family at the
        # provider: the next refresh gets invalid_grant, and the connection needs a person.
        server.by_refresh[pair.refresh_token or ""].rotated = True
        latest = next(t for t in reversed(server.by_access.values()) if t.family == pair.family)
        server.by_refresh[latest.refresh_token or ""].rotated = True
        latest.expires_at = time.time()  # stale: the next call refreshes
        refused = await stack.execute("http.request", resource, connection_id=con, key="k-r")
        asked = server.counts.refreshes
        again = await stack.execute("http.request", resource, connection_id=con, key="k-a")
    failures = [r.text for r in runs if r.status_code != 200]
    print(
        f"\noauth refresh through the stack: executions={CALLS} refreshes={refreshes} "
        f"invalid_grant={invalid_grant} failures={len(failures)} "
        f"wall={wall:.1f}s"
    )
    assert failures == [] and refreshes == 1 and invalid_grant == 0
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "connection_needs_reauth"
    assert again.status_code == 403 and server.counts.refreshes == asked  # provider not asked
    assert "moat connection connect" in again.json()["error"]["message"]
    listed = await stack.http.get(
        f"{stack.url}/v1/connections/{con}", headers={"Authorization": f"Bearer {stack.api_key}"}
    )
    assert listed.status_code == 200 and listed.json()["needs_reauth_at"], listed.text
    # Connected again: the mark goes, calls succeed.
    await _store(stack, con, server.grant(client, "ada", expires_in=3600))
    back = await stack.execute("http.request", resource, connection_id=con, key="k-b")
    assert back.status_code == 200, back.text
    family = [t for t in server.by_access.values() if t.family == pair.family]
    tokens = {t.access_token for t in family} | {t.refresh_token or "" for t in family}
    await secrets.assert_nowhere_at_rest(
        (*sorted(t for t in tokens if t), client.client_secret),
        answer=runs[0],
        stack=stack,
        workflows=[(r.json()["workflow_id"], r.json()["run_id"]) for r in runs[:20]],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )


async def test_the_callback_refuses_a_state_this_moat_did_not_seal(stack: Stack) -> None:
    forged = await stack.http.get(
        f"{stack.url}/v1/connections/oauth/callback",
        params={"state": "k.AAAA.BBBB", "code": "c"},
    )
    assert forged.status_code == 403, forged.text
    assert forged.json()["error"]["code"] == "forbidden"
