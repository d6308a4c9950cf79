"""The boundary owns the transaction: a tenant route's session is opened and the key
authenticated in it by one dependency, committed once the handler has returned (before the
answer goes out) and rolled back when the handler raises; the credential is checked before
the request's parameters."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.api import NewApiKey
from starter.gateway.deps import Caller, TenantSession
from starter.gateway.errors import install
from starter.service import MoatError, tenants
from store import api_keys, tenancy
from tests.support.stack import Stack


def _app(app_sessions: async_sessionmaker[AsyncSession]) -> FastAPI:
    app = FastAPI()
    install(app)
    # Only the sessions are used by the dependency.
    app.state.deps = SimpleNamespace(sessions=app_sessions)

    @app.post("/keys/{name}")
    async def write(name: str, session: TenantSession, caller: Caller) -> NewApiKey:
        return await tenants.create_key(session, caller.tenant_id, name)

    @app.post("/keys/{name}/then-fail")
    async def write_then_fail(name: str, session: TenantSession, caller: Caller) -> None:
        await tenants.create_key(session, caller.tenant_id, name)
        raise MoatError("conflict", "The handler failed after writing.")

    return app


async def _key_names(app_sessions: async_sessionmaker[AsyncSession], tenant_id: str) -> set[str]:
    async with tenancy.tenant_transaction(app_sessions, tenant_id) as session:
        return {k.name for k in await api_keys.list_api_keys(session, tenant_id)}


async def test_the_boundary_commits_on_success_and_rolls_back_a_failing_handler(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    auth = {"Authorization": f"Bearer {stack.api_key}"}
    transport = httpx.ASGITransport(app=_app(app_sessions))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        failed = await c.post("/keys/rolled-back/then-fail", headers=auth)
        assert failed.status_code == 409, failed.text
        assert failed.json()["error"]["code"] == "conflict"
        kept = await c.post("/keys/committed", headers=auth)
        assert kept.status_code == 200, kept.text
        # Committed before the answer went out: read at once, from another connection.
        names = await _key_names(app_sessions, stack.tenant_id)
        assert "committed" in names
        assert "rolled-back" not in names
        anonymous = await c.post("/keys/never")
        assert anonymous.status_code == 401
    assert "never" not in await _key_names(app_sessions, stack.tenant_id)


async def test_the_credential_is_checked_before_the_query(stack: Stack) -> None:
    """A 401 comes before a 400 on a route's parameters, as it does before its body."""
    url = f"{stack.url}/v1/receipts?limit=0"
    anonymous = await stack.http.get(url)
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    unknown = await stack.http.get(url, headers={"Authorization": "Bearer moat_no_" + "x" * 43})
    assert unknown.status_code == 401, unknown.text
    known = await stack.http.get(url, headers={"Authorization": f"Bearer {stack.api_key}"})
    assert known.status_code == 400, known.text
    assert known.json()["error"]["code"] == "schema_validation_failed"
