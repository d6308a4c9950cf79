"""The console's frame over HTTP: sign-in with an API key for a short session (the cookie's
attributes), the strict headers on every answer, CSRF refused on every form (nothing
changes), sign-out, a revoked key and an expired session ending the session (the sign-in
page says why), a page needing a scope the key lacks, and the locked assets."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, update

from starter.gateway.console import assets
from starter.gateway.console.auth import safe_next
from starter.gateway.console.headers import CSP
from store.models import ConsoleSessionRow
from tests.gateway.test_policy import ADMIN, new_key
from tests.support.console import csrf_of, sign_in
from tests.support.stack import Stack, StackFactory

ASSET = re.compile(r'(?:href|src)="(/console/static/[^"]+)" integrity="([^"]+)"')


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """A browser's HTTP: its own cookie jar."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as client:
        yield client


def assert_console_headers(answer: httpx.Response) -> None:
    assert answer.headers["content-security-policy"] == CSP, answer.url
    assert answer.headers["x-content-type-options"] == "nosniff", answer.url
    assert answer.headers["referrer-policy"] == "no-referrer", answer.url


def session_cookie(answer: httpx.Response) -> str:
    found = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
    return next(v for v in found if v.startswith("moat_console="))


def test_the_asset_lock_matches_the_files() -> None:
    files = assets.files()
    assert files, "no console assets"
    assert assets.read_lock() == {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    assert assets.lock_text() == (assets.static_dir() / assets.LOCK).read_text()


async def test_sign_in_headers_cookie_and_assets(stack: Stack, http: httpx.AsyncClient) -> None:
    form = await http.get("/console/sign-in")
    assert_console_headers(form)
    assert form.headers["cache-control"] == "no-store"
    # A wrong key: the form again, saying so, and no session.
    wrong = await http.post(
        "/console/sign-in",
        data={"csrf_token": csrf_of(form.text), "api_key": "moat_nokey_nosecret"},
    )
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
    assert "moat_console=" not in wrong.headers.get("set-cookie", "")
    signed = await http.post(
        "/console/sign-in",
        data={"csrf_token": csrf_of(form.text), "api_key": stack.api_key, "next": "/console"},
    )
    assert signed.status_code == 303, signed.text
    cookie = session_cookie(signed).lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    assert "secure" not in cookie  # plain HTTP, and no setting says TLS ends in front
    assert stack.api_key.lower() not in cookie
    home = await http.get("/console")
    assert home.status_code == 200 and stack.tenant_id in home.text
    for answer in (home, await http.get("/console/nope"), signed):
        assert_console_headers(answer)
    assert (await http.get("/console/nope")).status_code == 404
    # Every asset the page names is locked (the frame's own two among them; a page's own
    # assets are named by that page), served by the gateway, immutable, as locked (SRI too).
    linked = ASSET.findall(home.text)
    names = {url.rsplit("/", 1)[1] for url, _ in linked}
    assert {"console.css", "console.js"} <= names <= set(assets.read_lock())
    for url, integrity in linked:
        served = await http.get(url)
        assert served.status_code == 200 and "immutable" in served.headers["cache-control"]
        assert_console_headers(served)
        locked = assets.read_lock()[url.rsplit("/", 1)[1]]
        assert hashlib.sha256(served.content).hexdigest() == locked
        assert integrity == assets.load()[url.rsplit("/", 1)[1]].integrity
    assert (await http.get("/console/static/" + "0" * 20 + "/console.css")).status_code == 404


async def test_secure_cookie_behind_tls(make_stack: StackFactory) -> None:
    async with (
        make_stack(with_worker=False, console_behind_tls=True) as stack,
        httpx.AsyncClient(base_url=stack.url) as http,
    ):
        form = await http.get("/console/sign-in")
        assert "secure" in form.headers["set-cookie"].lower()
        token = csrf_of(form.text)  # the client keeps Secure cookies for HTTPS only
        signed = await http.post(
            "/console/sign-in",
            data={"csrf_token": token, "api_key": stack.api_key},
            headers={"Cookie": f"moat_console_signin={token}"},
        )
        assert "secure" in session_cookie(signed).lower()


async def test_csrf_is_refused_and_nothing_changes(stack: Stack, http: httpx.AsyncClient) -> None:
    form = await http.get("/console/sign-in")
    for token in (None, "x" * 43):
        data = {"api_key": stack.api_key} | ({"csrf_token": token} if token else {})
        refused = await http.post("/console/sign-in", data=data)
        assert refused.status_code == 403 and "security token" in refused.text
        assert "moat_console=" not in refused.headers.get("set-cookie", "")
    token = await sign_in(http, stack.url, stack.api_key)
    assert csrf_of(form.text) != token
    for data in ({}, {"csrf_token": "0" * 64}, {"csrf_token": csrf_of(form.text)}):
        refused = await http.post("/console/sign-out", data=data)
        assert refused.status_code == 403 and "nothing was" in refused.text, refused.text
        assert_console_headers(refused)
    still = await http.get("/console")
    assert still.status_code == 200  # not signed out
    out = await http.post("/console/sign-out", data={"csrf_token": token})
    assert out.status_code == 303


async def test_signed_out_revoked_and_expired_sessions_end(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    await sign_in(http, stack.url, stack.api_key)
    first = http.cookies.get("moat_console", path="/console")
    token = await sign_in(http, stack.url, stack.api_key)  # signing in again ends the first
    stolen = http.cookies.get("moat_console", path="/console")
    await http.post("/console/sign-out", data={"csrf_token": token})
    for cookie in (first, stolen):
        async with httpx.AsyncClient(base_url=stack.url, cookies={"moat_console": cookie}) as c:
            assert "why=signed_out" in (await c.get("/console")).headers["location"]
    async with httpx.AsyncClient(base_url=stack.url, cookies={"moat_console": stolen}) as other:
        gone = await other.get("/console/approvals")
        assert gone.status_code == 303
        assert gone.headers["location"].startswith("/console/sign-in?")
        assert "why=signed_out" in gone.headers["location"]
        assert "next=%2Fconsole%2Fapprovals" in gone.headers["location"]
        shown = await other.get(gone.headers["location"])
        assert "You are signed out" in shown.text
    # A revoked key ends the sessions it opened.
    key = await new_key(stack, ["approvals:read"])
    await sign_in(http, stack.url, key)
    revoked = await stack.http.post(
        f"{stack.url}/v1/admin/keys/{key.split('_')[1]}/revoke", headers=ADMIN
    )
    assert revoked.status_code == 200, revoked.text
    gone = await http.get("/console")
    assert "why=key_revoked" in gone.headers["location"]
    assert "has been revoked" in (await http.get(gone.headers["location"])).text
    # An expired session.
    await sign_in(http, stack.url, stack.api_key)
    async with stack.sessions.begin() as s:
        rows = await s.execute(
            select(ConsoleSessionRow.id).where(ConsoleSessionRow.tenant_id == stack.tenant_id)
        )
        await s.execute(
            update(ConsoleSessionRow)
            .where(ConsoleSessionRow.id.in_(list(rows.scalars())))
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    gone = await http.get("/console")
    assert gone.status_code == 303 and "why=expired" in gone.headers["location"]
    # Only the secret's hash is kept.
    async with stack.sessions() as s:
        kept = (await s.execute(select(ConsoleSessionRow))).scalars().all()
    assert all(stolen.split(".")[2] not in r.secret_hash for r in kept)


async def test_a_page_needing_a_scope_the_key_lacks_is_refused(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    narrow = await new_key(stack, ["execute:demo.echo"])
    await sign_in(http, stack.url, narrow)
    home = await http.get("/console")
    assert 'href="/console/approvals"' not in home.text
    refused = await http.get("/console/approvals")
    assert refused.status_code == 403 and "scope_missing" in refused.text
    assert "approvals:read" in refused.text and "Waiting for a decision" not in refused.text
    assert_console_headers(refused)


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ("/console/approvals", "/console/approvals"),
        (
            "/console/approvals?decided=apr_1&outcome=approved",
            "/console/approvals?decided=apr_1&outcome=approved",
        ),
        ("https://evil.example/console", "/console"),
        ("//evil.example/console", "/console"),
        ("/console//evil.example", "/console"),
        ("/console/../v1/receipts", "/console"),
        ("/v1/receipts", "/console"),
        ("/console\\evil", "/console"),
        (None, "/console"),
    ],
)
def test_sign_in_leads_back_only_to_console_pages(asked: str | None, kept: str) -> None:
    assert safe_next(asked) == kept
