"""``POST /v1/executions`` reads its parameters by hand (``routes.executions.ExecuteRoute``):
the gateway's route takes that way, and it hands the endpoint what FastAPI's dependency
solving hands it, for every shape of the bearer key and the two headers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute

from schemas.settings import MoatSettings
from starter.gateway.access import api_routes, needs
from starter.gateway.app import create_app
from starter.gateway.deps import TenantKey
from starter.gateway.routes.executions import (
    ExecuteRoute,
    IdempotencyKeyHeader,
    PreferHeader,
    _read_by_hand,
)


def test_the_gateway_reads_the_execute_route_by_hand() -> None:
    app = create_app(MoatSettings(admin_port=None))
    [route] = [
        r for path, r in api_routes(app) if path == "/v1/executions" and "POST" in (r.methods or ())
    ]
    assert isinstance(route, ExecuteRoute)
    assert _read_by_hand(route.dependant)


def _app(route_class: type[APIRoute], seen: list[dict[str, Any]]) -> FastAPI:
    async def execute(
        request: Request,
        credentials: TenantKey,
        idempotency_key: IdempotencyKeyHeader = None,
        prefer: PreferHeader = None,
    ) -> Response:
        seen.append(
            {
                "credentials": None
                if credentials is None
                else (type(credentials).__name__, credentials.model_dump()),
                "idempotency_key": idempotency_key,
                "prefer": prefer,
                "body": await request.body(),
            }
        )
        return Response(b"{}", media_type="application/json")

    router = APIRouter()
    router.add_api_route(
        "/v1/executions",
        execute,
        methods=["POST"],
        route_class_override=route_class,
        dependencies=[needs(also="documented")],
    )
    app = FastAPI()
    app.include_router(router)
    return app


HEADERS: list[list[tuple[str, str]]] = [
    [],
    [("Authorization", "Bearer moat_abc_secret")],
    [("authorization", "bearer moat_abc_secret"), ("idempotency-key", "k1")],
    [("Authorization", "Basic dXNlcjpwdw==")],
    [("Authorization", "Bearer")],
    [("Authorization", "Bearer "), ("Prefer", "wait=3")],
    [("Authorization", "Bearer a b c")],
    [("Authorization", "Bearer one"), ("Authorization", "Bearer two")],
    [("Idempotency-Key", "first"), ("Idempotency-Key", "second"), ("Prefer", "")],
    [("IDEMPOTENCY-KEY", ""), ("prefer", "respond-async, wait=5"), ("prefer", "wait=9")],
    [("Idempotency_Key", "underscored"), ("Idempotency-Key", "é"), ("Authorization", "Bearer é")],
]


@pytest.mark.parametrize("headers", HEADERS)
async def test_by_hand_the_endpoint_gets_what_fastapi_gives(headers: list[tuple[str, str]]) -> None:
    seen: dict[str, list[dict[str, Any]]] = {"fastapi": [], "by hand": []}
    for name, route_class in (("fastapi", APIRoute), ("by hand", ExecuteRoute)):
        app = _app(route_class, seen[name])
        [(_, route)] = list(api_routes(app))
        assert _read_by_hand(route.dependant)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            encoded = [(k.encode(), v.encode()) for k, v in headers]
            resp = await client.post("/v1/executions", content=b'{"a":1}', headers=encoded)
        assert resp.status_code == 200
    assert seen["by hand"] == seen["fastapi"]
    assert len(seen["fastapi"]) == 1
