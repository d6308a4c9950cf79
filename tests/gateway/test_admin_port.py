"""``MOAT_ADMIN_PORT``: the routes that take the admin key leave the public listener for one
of their own, which a deployment keeps on its internal network."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.testing import WorkflowEnvironment

from schemas.settings import MoatSettings
from starter.devstack import free_port, serve_asgi
from starter.gateway.app import create_app, serve
from tests.gateway.test_pagination import every_page
from tests.support.stack import ADMIN_KEY, StackFactory

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
NO_PAYLOADS: dict[str, Any] = {"payloads": []}


async def paths(http: httpx.AsyncClient, url: str) -> set[str]:
    return set((await http.get(f"{url}/openapi.json")).json()["paths"])


async def test_admin_routes_leave_the_public_app_for_the_admin_app(
    make_stack: StackFactory, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with make_stack(with_worker=False, admin_port=free_port()) as stack:
        public = stack.url
        tenants = await stack.http.get(f"{public}/v1/admin/tenants", headers=ADMIN)
        assert tenants.status_code == 404, tenants.text
        assert tenants.json()["error"]["code"] == "not_found"
        decode = await stack.http.post(f"{public}/codec/decode", json=NO_PAYLOADS, headers=ADMIN)
        assert decode.status_code == 404, decode.text
        listed = await paths(stack.http, public)
        assert not {p for p in listed if p.startswith("/v1/admin")}
        assert not listed & {"/codec/decode", "/codec/encode"}
        # The Web UI's codec door stays where the UI's browser reaches it; the API stays whole.
        assert "/codec/ui/{token}/decode" in listed
        assert {"/v1/executions", "/v1/receipts", "/.well-known/jwks.json"} <= listed

        app = create_app(stack.settings, client=stack.client, sessions=app_sessions, admin=True)
        async with serve_asgi(app) as admin:
            every = await every_page(stack.http, f"{admin}/v1/admin/tenants", ADMIN)
            assert stack.tenant_id in {t["id"] for t in every}
            key = await stack.http.post(
                f"{admin}/v1/admin/tenants/{stack.tenant_id}/keys", json={}, headers=ADMIN
            )
            assert key.status_code == 201, key.text
            decode = await stack.http.post(f"{admin}/codec/decode", json=NO_PAYLOADS, headers=ADMIN)
            assert decode.status_code == 200 and decode.json() == NO_PAYLOADS
            tenant_key = {"Authorization": f"Bearer {stack.api_key}"}
            refused = await stack.http.get(f"{admin}/v1/admin/tenants", headers=tenant_key)
            assert refused.status_code == 403
            executions = await stack.http.get(f"{admin}/v1/receipts", headers=tenant_key)
            assert executions.status_code == 404
            assert (await stack.http.get(f"{admin}/healthz")).status_code == 200
            served = await paths(stack.http, admin)
            assert served and all(
                p.startswith(("/v1/admin/", "/codec/", "/healthz")) for p in served
            )
            assert "/codec/decode" in served and "/v1/admin/tenants" in served


async def test_moat_gateway_listens_on_both_ports(
    base_settings: MoatSettings, temporal: WorkflowEnvironment
) -> None:
    """What ``moat gateway`` runs: two listeners over one database pool and Temporal client,
    stopped together."""
    target = temporal.client.service_client.config.target_host
    settings = base_settings.model_copy(
        update={"temporal_address": target, "gateway_port": free_port(), "admin_port": free_port()}
    )
    public, admin = (f"http://127.0.0.1:{p}" for p in (settings.gateway_port, settings.admin_port))
    stop = asyncio.Event()
    frozen = gc.get_freeze_count()
    gateway = asyncio.create_task(serve(settings, stop))
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for url in (public, admin):
                for _ in range(600):
                    assert not gateway.done(), "the gateway stopped before it answered"
                    try:
                        if (await http.get(f"{url}/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)
            assert (await http.get(f"{public}/v1/admin/tenants", headers=ADMIN)).status_code == 404
            assert (await http.get(f"{admin}/v1/admin/tenants", headers=ADMIN)).status_code == 200
            assert (await http.get(f"{public}/v1/capabilities")).status_code == 200
            assert (await http.get(f"{admin}/v1/capabilities")).status_code == 404
        # Built, it took its startup objects out of the garbage collector's later scans.
        assert gc.get_freeze_count() > frozen
    finally:
        stop.set()
        assert await gateway == 0
        gc.unfreeze()  # this test process goes on collecting as before


def test_admin_port_must_differ_from_the_gateway_port() -> None:
    with pytest.raises(ValueError, match="admin_port must differ from gateway_port"):
        MoatSettings(gateway_port=8000, admin_port=8000)
