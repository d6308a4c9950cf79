"""Waiting, polling and reading through the HTTP API: Prefer: wait, 202 + Location, the
execution envelope, receipt listing with filters and cursors, OpenAPI."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from moat_client import AsyncMoatClient

import worker as worker_module
from tests.support.stack import Stack, StackFactory


def auth(stack: Stack, key: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key or stack.api_key}"}


async def test_accepted_then_polled_until_executed(make_stack: StackFactory) -> None:
    """No worker yet: the run waits in Temporal. The client gets 202 + Location, and can
    poll that receipt id before any worker has seen it; a worker then finishes the run."""
    async with make_stack(with_worker=False) as stack:
        response = await stack.execute(
            "demo.echo", {"slow": True}, key="poll-me", headers_extra={"Prefer": "wait=0.2"}
        )
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["status"] == "accepted" and body["receipt_id"]
        assert response.headers["preference-applied"] == "wait=0.2"
        assert response.headers["retry-after"] == "1"
        location = response.headers["location"]
        assert location == f"/v1/executions/{body['receipt_id']}"

        polled = await stack.http.get(stack.url + location, headers=auth(stack))
        assert polled.status_code == 202, polled.text
        assert polled.json()["status"] == "accepted"
        assert polled.json()["workflow_id"] == body["workflow_id"]
        assert polled.json()["idempotency_key"] == "poll-me"

        # The same request again attaches to the same run: same receipt id.
        again = await stack.execute(
            "demo.echo", {"slow": True}, key="poll-me", headers_extra={"Prefer": "wait=0"}
        )
        assert again.status_code == 202 and again.json()["receipt_id"] == body["receipt_id"]

        async with worker_module.activity_deps(stack.settings) as (sessions, http):
            worker = worker_module.build_worker(stack.client, stack.settings, sessions, http)
            async with worker, AsyncMoatClient(stack.url, stack.api_key) as client:
                done = await client.wait(body["receipt_id"], max_seconds=30, interval=0.1)
        assert done.http_status == 200 and done.status == "executed"
        assert done.receipt_id == body["receipt_id"]
        assert done.receipt is not None and done.receipt.idempotency_key == "poll-me"


async def test_prefer_wait_is_capped(make_stack: StackFactory) -> None:
    async with make_stack(max_wait_seconds=0.1, with_worker=False) as stack:
        response = await stack.execute(
            "demo.echo", {"x": 1}, headers_extra={"Prefer": "respond-async, wait=100"}
        )
        assert response.status_code == 202
        assert response.headers["preference-applied"] == "wait=0.1"


async def test_execution_envelope_after_the_fact(stack: Stack) -> None:
    first = (await stack.execute("demo.echo", {"n": 1}, key="later")).json()
    got = await stack.http.get(
        f"{stack.url}/v1/executions/{first['receipt_id']}", headers=auth(stack)
    )
    assert got.status_code == 200
    assert got.json()["receipt"] == first["receipt"]
    assert got.json()["status"] == "executed"


async def seed(stack: Stack) -> list[dict[str, Any]]:
    """Five echo executions and one denied http.request, one after another."""
    made = []
    for i in range(5):
        response = await stack.execute("demo.echo", {"i": i}, key=f"seed-{i}")
        assert response.status_code == 200, response.text
        made.append(response.json()["receipt"])
    denied = await stack.execute(
        "http.request", {"method": "GET", "url": "http://10.0.0.1/x"}, key="seed-denied"
    )
    assert denied.status_code == 403, denied.text
    made.append(denied.json()["receipt"])
    return made


async def test_list_receipts_filters_and_pages(make_stack: StackFactory) -> None:
    async with make_stack(with_worker=True) as stack:
        made = await seed(stack)
        url = f"{stack.url}/v1/receipts"

        everything = (await stack.http.get(url, headers=auth(stack))).json()
        assert [r["id"] for r in everything["items"]] == [r["id"] for r in reversed(made)]
        assert everything["next_cursor"] is None

        # Pages of two, newest first, until the cursor runs out.
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await stack.http.get(url, params=params, headers=auth(stack))).json()
            assert len(page["items"]) <= 2
            seen += [r["id"] for r in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [r["id"] for r in reversed(made)]

        async def ids(**params: Any) -> list[str]:
            response = await stack.http.get(url, params=params, headers=auth(stack))
            assert response.status_code == 200, response.text
            return [r["id"] for r in response.json()["items"]]

        assert await ids(capability_id="http.request") == [made[5]["id"]]
        assert made[5]["status"] != "success"
        assert await ids(status=made[5]["status"]) == [made[5]["id"]]
        assert await ids(status="timeout") == []
        assert await ids(idempotency_key="seed-3") == [made[3]["id"]]
        assert set(await ids(capability_id="demo.echo", status="success")) == {
            r["id"] for r in made[:5]
        }
        middle = datetime.fromisoformat(made[2]["timestamp"])
        assert await ids(since=middle.isoformat(), capability_id="demo.echo") == [
            r["id"] for r in reversed(made[2:5])
        ]
        assert await ids(until=middle.isoformat()) == [r["id"] for r in reversed(made[:2])]
        naive = middle.astimezone(UTC).replace(tzinfo=None).isoformat()
        response = await stack.http.get(url, params={"until": naive}, headers=auth(stack))
        assert response.status_code == 400  # no offset: ambiguous, refused
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        assert await ids(since=future) == []

        # The client pages for you.
        async with AsyncMoatClient(stack.url, stack.api_key) as client:
            listed = [r.id async for r in client.iter_receipts(limit=4)]
        assert listed == [r["id"] for r in reversed(made)]


async def test_tenant_b_sees_nothing_of_tenant_a(stack: Stack) -> None:
    mine = (await stack.execute("demo.echo", {"private": 1}, key="a-only")).json()
    _, other_key = await stack.new_tenant()
    theirs = auth(stack, other_key)
    for path in (
        f"/v1/receipts/{mine['receipt_id']}",
        f"/v1/executions/{mine['receipt_id']}",
    ):
        response = await stack.http.get(stack.url + path, headers=theirs)
        assert response.status_code == 404, path
    for params in ({}, {"idempotency_key": "a-only"}, {"capability_id": "demo.echo"}):
        page = await stack.http.get(f"{stack.url}/v1/receipts", params=params, headers=theirs)
        assert page.status_code == 200 and page.json()["items"] == []
    # A's own view still has it.
    page = await stack.http.get(f"{stack.url}/v1/receipts", headers=auth(stack))
    assert [r["id"] for r in page.json()["items"]] == [mine["receipt_id"]]


async def test_running_execution_is_invisible_to_another_tenant(make_stack: StackFactory) -> None:
    async with make_stack(with_worker=False) as stack:
        response = await stack.execute(
            "demo.echo", {"x": 1}, key="running", headers_extra={"Prefer": "wait=0"}
        )
        assert response.status_code == 202
        _, other_key = await stack.new_tenant()
        await asyncio.sleep(0.2)
        polled = await stack.http.get(
            stack.url + response.headers["location"], headers=auth(stack, other_key)
        )
        assert polled.status_code == 404
        assert polled.json()["error"]["code"] == "execution_not_found"


async def test_openapi_documents_every_route_and_error(stack: Stack) -> None:
    schema = (await stack.http.get(f"{stack.url}/openapi.json")).json()
    paths = schema["paths"]
    routes = {(m.upper(), p) for p, ops in paths.items() for m in ops}
    assert {
        ("POST", "/v1/executions"),
        ("GET", "/v1/executions/{receipt_id}"),
        ("GET", "/v1/receipts"),
        ("GET", "/v1/receipts/{receipt_id}"),
        ("GET", "/v1/capabilities"),
        ("POST", "/v1/admin/tenants"),
        ("GET", "/v1/admin/tenants"),
        ("POST", "/v1/admin/tenants/{tenant_id}/keys"),
        ("GET", "/v1/admin/tenants/{tenant_id}/keys"),
        ("POST", "/v1/admin/keys/{key_id}/revoke"),
    } <= routes
    components = schema["components"]["schemas"]
    assert "HTTPValidationError" not in components
    for path, ops in paths.items():
        for method, op in ops.items():
            assert "500" in op["responses"], (method, path)
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.rsplit("/", 1)[1] in ("ErrorEnvelope", "Envelope", "PlanEnvelope"), (
                        path,
                        status,
                    )
    execute = paths["/v1/executions"]["post"]
    assert {"200", "202", "400", "401", "403", "404", "413", "422", "500", "502"} <= set(
        execute["responses"]
    )
    body = execute["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = components[body.rsplit("/", 1)[1]]
    assert {"schema_version", "capability_id", "input", "idempotency_key"} <= set(
        request["properties"]
    )
    assert {"TenantKey", "AdminKey"} <= set(schema["components"]["securitySchemes"])
    docs = await stack.http.get(f"{stack.url}/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
