"""GitHub App connections against the GitHub fake, through the whole stack: many concurrent
executions share one installation token (one mint), a token near its expiry is minted again
once, a token GitHub revoked early is minted again once and the call goes through, an
installation GitHub no longer has marks the connection ``needs_reauth`` (the next call is
refused without reaching GitHub), a JWT signed with the wrong key is a clear failure, and
neither the private key nor an installation token is in any store a run touches
(``tests/system/test_secrets.py`` searches them all)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from temporalio.testing import WorkflowEnvironment

from starter.devstack import EmbeddedPostgres
from starter.devstack.providers import FakeGithub
from tests.support.stack import ADMIN_KEY, Stack, StackFactory
from tests.system.test_secrets import (
    assert_nowhere_at_rest,
    captured_logs,
    captured_spans,
    temporal_on_disk,
)

__all__ = ["temporal_on_disk"]  # the fixture, shared with the search of every store

CONCURRENT = 50
MINT_PATH = "/access_tokens"


def _private_key() -> tuple[str, str]:
    """A new App key: (private PEM as GitHub gives it, public PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory,
    github: FakeGithub,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
) -> AsyncIterator[Stack]:
    allowed = [github.allow_entry]
    async with make_stack(http_allow_hosts=allowed, temporal_env=temporal_on_disk[0]) as s:
        yield s


_numbers = iter(range(int(time.time()) % 100_000 * 10, 10**9))


async def _app_connection(
    stack: Stack, github: FakeGithub, *, installed: bool = True, key: str | None = None
) -> tuple[str, str, int]:
    """A GitHub App registered with the fake and a connection holding it: (connection id,
    private key, installation id)."""
    private, public = _private_key()
    app_id, installation = next(_numbers), next(_numbers)
    github.apps.register_app(app_id, public, *([installation] if installed else []))
    config = {"base_url": github.base_url, "app_id": app_id, "installation_id": installation}
    con = await stack.add_connection("github", key or private, config=config, name="app")
    return con, key or private, installation


async def _issue(stack: Stack, con: str, repo: str, title: str | None = None) -> httpx.Response:
    data = {"owner": "octo", "repo": repo, "title": title or uuid.uuid4().hex}
    return await stack.execute("github.create_issue", data, connection_id=con)


def _mints(github: FakeGithub, installation: int) -> int:
    return len(github.calls(f"/app/installations/{installation}{MINT_PATH}"))


async def test_calls_share_one_token_and_no_secret_is_at_rest(
    stack: Stack,
    github: FakeGithub,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    repo = f"r{uuid.uuid4().hex[:8]}"
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        con, private, installation = await _app_connection(stack, github)
        started = time.monotonic()
        runs = await asyncio.gather(
            *(_issue(stack, con, repo, f"issue {i}") for i in range(CONCURRENT))
        )
        wall = time.monotonic() - started
        number = runs[0].json()["output"]["number"]
        closed = await stack.execute(
            "github.close_issue",
            {"owner": "octo", "repo": repo, "number": number},
            connection_id=con,
        )
    assert [r.status_code for r in runs] == [200] * CONCURRENT, runs[0].text
    assert closed.status_code == 200, closed.text
    assert len(github.issues_of("octo", repo)) == CONCURRENT
    assert github.closes_of("octo", repo, number) == 1
    assert _mints(github, installation) == 1
    tokens = {t for t, (i, _) in github.apps.tokens.items() if i == installation}
    assert len(tokens) == 1
    sent = {
        r.headers.get("authorization")
        for r in github.requests
        if r.path.startswith(f"/repos/octo/{repo}/")
    }
    assert sent == {f"Bearer {t}" for t in tokens}
    calls = len([r for r in github.requests if r.path.startswith(f"/repos/octo/{repo}/")])
    print(f"\n{CONCURRENT} create_issue + 1 close_issue: {calls} calls, 1 mint, {wall:.2f}s")
    secrets = (*tokens, *_key_lines(private))
    await assert_nowhere_at_rest(
        secrets,
        answer=runs[0],
        stack=stack,
        workflows=[(r.json()["workflow_id"], r.json()["run_id"]) for r in (*runs, closed)],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )


def _key_lines(private: str) -> list[str]:
    """The key's whole base64 lines (the last, shorter one could match by chance)."""
    return [line for line in private.splitlines() if len(line) == 64]


async def test_a_token_near_expiry_is_minted_again_once(stack: Stack, github: FakeGithub) -> None:
    con, _, installation = await _app_connection(stack, github)
    repo = f"r{uuid.uuid4().hex[:8]}"
    github.apps.token_seconds = 30  # within the minute a token counts as stale before it ends
    try:
        first = await _issue(stack, con, repo)
    finally:
        github.apps.token_seconds = 3600
    runs = await asyncio.gather(*(_issue(stack, con, repo) for _ in range(10)))
    assert [r.status_code for r in (first, *runs)] == [200] * 11, first.text
    assert _mints(github, installation) == 2


async def test_a_revoked_token_is_minted_again_once_for_all_callers(
    stack: Stack, github: FakeGithub
) -> None:
    con, _, installation = await _app_connection(stack, github)
    repo = f"r{uuid.uuid4().hex[:8]}"
    first = await _issue(stack, con, repo)
    (token,) = [t for t, (i, _) in github.apps.tokens.items() if i == installation]
    revoked = await stack.http.delete(
        f"{github.base_url}/installation/token", headers={"Authorization": f"token {token}"}
    )
    assert revoked.status_code == 204
    after = await asyncio.gather(*(_issue(stack, con, repo) for _ in range(10)))
    assert [r.status_code for r in (first, *after)] == [200] * 11, after[0].text
    assert _mints(github, installation) == 2
    refused = [r for r in github.requests if r.headers.get("authorization") == f"Bearer {token}"]
    assert 2 <= len(refused) <= 11  # the first call, then each GitHub refused, retried once


async def test_a_gone_installation_needs_reauth(stack: Stack, github: FakeGithub) -> None:
    con, _, installation = await _app_connection(stack, github, installed=False)
    repo = f"r{uuid.uuid4().hex[:8]}"
    first = await _issue(stack, con, repo)
    second = await _issue(stack, con, repo)
    for answer in (first, second):
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["code"] == "connection_needs_reauth"
        assert answer.json()["receipt"]["error_code"] == "connection_needs_reauth"
    assert _mints(github, installation) == 1  # the second call did not reach GitHub
    assert github.issues_of("octo", repo) == []


async def test_a_jwt_signed_with_the_wrong_key_is_a_clear_failure(
    stack: Stack, github: FakeGithub
) -> None:
    wrong, _ = _private_key()
    con, _, installation = await _app_connection(stack, github, key=wrong)
    before = len(github.apps.jwt_refusals)
    answer = await _issue(stack, con, f"r{uuid.uuid4().hex[:8]}")
    assert answer.status_code == 502, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "provider_auth_failure"
    assert answer.json()["receipt"]["http_status"] == 401
    assert github.apps.jwt_refusals[before:] == ["A JSON web token could not be decoded"]
    assert _mints(github, installation) == 1


async def test_a_key_that_is_not_an_rsa_key_is_refused_unechoed(stack: Stack) -> None:
    private, _ = _private_key()
    broken = private.replace(private.splitlines()[3], "A" * 64)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    url = f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/connections"
    config = {"app_id": 1, "installation_id": 2}
    cases = (
        (broken, config, "RSA key in PEM"),
        ("ghp_" + "x" * 36, config, "RSA key in PEM"),
        (private, {}, "only for a GitHub App connection"),
    )
    for secret, cfg, words in cases:
        body = {"type": "github", "name": "app", "secret": secret, "config": cfg}
        made = await stack.http.post(url, json=body, headers=admin)
        assert made.status_code == 400, made.text
        assert words in made.text
        assert secret not in made.text and "A" * 64 not in made.text
    con = await stack.add_connection("github", private, config=config, name="app")
    for secret in (broken, "ghp_" + "x" * 36):
        rotated = await stack.http.post(
            f"{url}/{con}/rotate", json={"secret": secret}, headers=admin
        )
        assert rotated.status_code == 400, rotated.text
        assert "RSA key in PEM" in rotated.text and secret not in rotated.text
    again, _ = _private_key()
    rotated = await stack.http.post(f"{url}/{con}/rotate", json={"secret": again}, headers=admin)
    assert rotated.status_code == 200, rotated.text
