"""The console's frame: sign-in with an API key for a short session, the cookie's
attributes, CSRF on every form, the strict headers on every answer, sign-out and a revoked
key ending the session, an expired one, and the locked assets."""

from __future__ import annotations

import httpx
import pytest

from starter.gateway.console.headers import CSP
from tests.support.console import csrf_of
from tests.support.stack import Stack


@pytest.fixture
async def browser_http(stack: Stack) -> httpx.AsyncClient:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        yield http


def assert_console_headers(answer: httpx.Response) -> None:
    assert answer.headers["content-security-policy"] == CSP, answer.url
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"


async def test_sign_in_sets_a_strict_cookie_and_pages_carry_the_headers(
    stack: Stack, browser_http: httpx.AsyncClient
) -> None:
    form = await browser_http.get("/console/sign-in")
    assert_console_headers(form)
    assert form.headers["cache-control"] == "no-store"
    signed = await browser_http.post(
        "/console/sign-in",
        data={"csrf_token": csrf_of(form.text), "api_key": stack.api_key, "next": "/console"},
    )
    assert signed.status_code == 303, signed.text
    cookie = next(
        v
        for k, v in signed.headers.multi_items()
        if k == "set-cookie" and v.startswith("moat_console=")
    )
    lowered = cookie.lower()
    assert "httponly" in lowered and "samesite=strict" in lowered and "path=/console" in lowered
    assert "secure" not in lowered  # plain HTTP, no setting saying TLS ends in front
    assert stack.api_key not in cookie
    home = await browser_http.get("/console")
    assert home.status_code == 200
    assert_console_headers(home)
    assert "key:" in home.text and stack.tenant_id in home.text
