"""Slack connected through OAuth v2 against the Slack fake, as docs/connections.md walks
it: an ``oauth2`` connection with the ``slack`` profile pointed at the fake by its
``base_url``; ``moat connection connect``'s service (or the console's Connect button, with
``connections:write`` and the CSRF token) gives the authorization URL (PKCE S256); the fake
sends the person back to the gateway's callback, which exchanges the code and stores the
pair; ``slack.post_message`` through the connection succeeds; once the access token has
expired, the next execution refreshes it once (rotation) and succeeds."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest_asyncio
from sqlalchemy import update

from starter.devstack.providers.slack import FakeSlack
from starter.service import oauth_connect
from store import tenancy
from store.keyrings.connections import ConnectionCipher
from store.models import ConnectionTokenRow
from tests.gateway.test_policy import new_key
from tests.support.console import sign_in
from tests.support.stack import Stack, StackFactory

CLIENT_ID, CLIENT_SECRET = "1234.5678", "fake-slack-client-secret"


@pytest_asyncio.fixture(loop_scope="session")
async def stack(make_stack: StackFactory, slack: FakeSlack) -> AsyncIterator[Stack]:
    allow = [slack.base_url.removeprefix("http://")]
    async with make_stack(http_allow_hosts=allow) as s:
        yield s


async def _connect(stack: Stack, connection_id: str) -> str:
    """What `moat connection connect` prints: the authorization URL."""
    cipher = ConnectionCipher.from_settings(stack.settings)
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        return await oauth_connect.begin(
            session,
            cipher,
            stack.tenant_id,
            connection_id,
            redirect_uri=oauth_connect.redirect_uri(stack.settings),
        )


async def _post(stack: Stack, con: str, text: str) -> httpx.Response:
    return await stack.execute(
        "slack.post_message", {"channel": "C0OAUTH", "text": text}, connection_id=con
    )


async def test_slack_connected_over_oauth_posts_and_refreshes_once(
    stack: Stack, slack: FakeSlack
) -> None:
    slack.oauth.clients[CLIENT_ID] = CLIENT_SECRET
    config = {"profile": "slack", "client_id": CLIENT_ID, "scopes": ["chat:write"]}
    con = await stack.add_connection(
        "oauth2", CLIENT_SECRET, config=config | {"base_url": slack.base_url}
    )
    url = await _connect(stack, con)
    assert url.startswith(f"{slack.base_url}/oauth/v2/authorize?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert query["code_challenge_method"] == "S256" and query["code_challenge"]
    assert query["scope"] == "chat:write" and query["client_id"] == CLIENT_ID
    # The person consents at the fake, which sends the browser to the gateway's callback.
    went = await stack.http.get(url, follow_redirects=False)
    assert went.status_code == 302, went.text
    back = urlsplit(went.headers["location"])
    assert back.path == oauth_connect.CALLBACK_PATH
    landed = await stack.http.get(f"{stack.url}{back.path}?{back.query}")
    assert landed.status_code == 200 and "Connected" in landed.text, landed.text
    assert slack.oauth.exchanges >= 1
    issued = set(slack.oauth.access_tokens)

    first = await _post(stack, con, "over oauth")
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "executed"

    # The access token expires (at the fake and by its recorded expiry): one refresh.
    slack.oauth.expire()
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        await session.execute(
            update(ConnectionTokenRow)
            .where(ConnectionTokenRow.connection_id == con)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    refreshes = slack.oauth.refreshes
    second = await _post(stack, con, "after expiry")
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "executed"
    assert slack.oauth.refreshes == refreshes + 1
    assert set(slack.oauth.access_tokens) - issued  # a new, rotated access token
    assert [m["text"] for m in slack.posted("C0OAUTH")][-2:] == ["over oauth", "after expiry"]


async def test_the_fake_refuses_a_wrong_verifier_and_a_spent_refresh_token(
    slack: FakeSlack,
) -> None:
    slack.oauth.clients["9.9"] = "s"
    redirect = "http://127.0.0.1:9/back"
    form = {"client_id": "9.9", "client_secret": "s", "redirect_uri": redirect}
    async with httpx.AsyncClient(base_url=slack.base_url) as http:
        went = await http.get(
            "/oauth/v2/authorize",
            params={"client_id": "9.9", "redirect_uri": redirect, "state": "x"}
            | {"code_challenge": "kJY88LKAOSmSP9hDaezb22Ab0dmBd151ss5dOaXbF34"}
            | {"code_challenge_method": "S256"},
        )
        code = parse_qs(urlsplit(went.headers["location"]).query)["code"][0]
        wrong = await http.post(
            "/api/oauth.v2.access", data=form | {"code": code, "code_verifier": "nope"}
        )
        assert wrong.json() == {"ok": False, "error": "invalid_code"}
        secret = await http.post("/api/oauth.v2.access", data=form | {"client_secret": "no"})
        assert secret.json()["error"] == "bad_client_secret"
        # The challenge's own verifier gets a pair, whose refresh token rotates.
        verifier = "dBjftJeZ4CVP-mJ0lhsv1H3bNmnEU3xO0Uj7Zq5xwzM"
        went = await http.get(
            "/oauth/v2/authorize",
            params={"client_id": "9.9", "redirect_uri": redirect, "state": "x"}
            | {"code_challenge": "kJY88LKAOSmSP9hDaezb22Ab0dmBd151ss5dOaXbF34"}
            | {"code_challenge_method": "S256"},
        )
        code = parse_qs(urlsplit(went.headers["location"]).query)["code"][0]
        pair = (
            await http.post(
                "/api/oauth.v2.access", data=form | {"code": code, "code_verifier": verifier}
            )
        ).json()
        assert pair["ok"], pair
        assert pair["access_token"].startswith("xoxe.xoxb-")
        assert pair["refresh_token"].startswith("xoxe-1-") and pair["expires_in"] == 43200
        refresh = form | {"grant_type": "refresh_token", "refresh_token": pair["refresh_token"]}
        assert (await http.post("/api/oauth.v2.access", data=refresh)).json()["ok"]
        spent = await http.post("/api/oauth.v2.access", data=refresh)
        assert spent.json() == {"ok": False, "error": "invalid_refresh_token"}


async def test_the_console_connect_button(stack: Stack, slack: FakeSlack) -> None:
    config = {"profile": "slack", "client_id": "42.42", "scopes": ["chat:write"]}
    con = await stack.add_connection(
        "oauth2", "console-client-secret", config=config | {"base_url": slack.base_url}
    )
    path = f"/console/connections/{con}/connect"
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as reader,
        httpx.AsyncClient(base_url=stack.url, timeout=30) as writer,
    ):
        csrf = await sign_in(reader, stack.url, await new_key(stack, ["execute:*"]))
        refused = await reader.post(path, data={"csrf_token": csrf})
        assert refused.status_code == 403 and "scope_missing" in refused.text
        csrf = await sign_in(writer, stack.url, await new_key(stack, ["connections:write"]))
        listed = await writer.get("/console/connections")
        assert f'action="{path}"' in listed.text and ">Connect</button>" in listed.text
        for wrong in ("", "not-the-token"):
            answer = await writer.post(path, data={"csrf_token": wrong})
            assert answer.status_code == 403 and "security token" in answer.text
        moving = await writer.post(path, data={"csrf_token": csrf})
        assert moving.status_code == 200, moving.text
        found = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', moving.text)
        assert found is not None, moving.text
        target = html.unescape(found.group(1))
        assert target.startswith(f"{slack.base_url}/oauth/v2/authorize?")
        query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
        assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
        went = await writer.get(target, follow_redirects=False)
        back = urlsplit(went.headers["location"])
        landed = await writer.get(f"{back.path}?{back.query}")
        assert landed.status_code == 200, landed.text
        assert f"/console/connections?connected={con}" in landed.text
        notice = await writer.get(f"/console/connections?connected={con}")
        assert f"Connection <code>{con}</code> connected." in notice.text
