"""The console's executions and plans pages over HTTP: what each shows a session, and
nothing the API would not show the same key (output and manifest need ``outputs:read``;
another tenant's execution is not found)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from tests.gateway.test_policy import new_key, put_policy
from tests.plans.support import post_plan
from tests.support.console import sign_in
from tests.support.stack import Stack


@asynccontextmanager
async def signed_in(stack: Stack, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        await sign_in(http, stack.url, key)
        yield http


async def test_executions_list_and_detail_show_what_the_api_shows(stack: Stack) -> None:
    marker = f"console-{uuid.uuid4().hex[:8]}"
    done = (await stack.execute("demo.echo", {"said": marker}, key=marker)).json()
    receipt_id = done["receipt_id"]
    async with signed_in(stack, stack.api_key) as http:
        listed = await http.get("/console/executions")
        assert listed.status_code == 200 and receipt_id in listed.text
        filtered = await http.get(
            "/console/executions",
            params={"capability_id": "demo.echo", "status": "success", "idempotency_key": marker},
        )
        assert receipt_id in filtered.text
        for params in ({"status": "failure"}, {"since": "2999-01-01T00:00"}):
            assert receipt_id not in (await http.get("/console/executions", params=params)).text
        refused = await http.get("/console/executions", params={"since": "yesterday"})
        assert refused.status_code == 400 and "schema_validation_failed" in refused.text

        page = await http.get(f"/console/executions/{receipt_id}")
        assert page.status_code == 200
        for shown in ("RUN_STARTED", "MANIFEST_WRITTEN", marker, "data-manifest-check"):
            assert shown in page.text, shown
        assert "Signature verified" not in page.text  # only the browser says so
        assert "manifest-verify.js" in page.text and "<script>" not in page.text

        raw = await http.get(f"/console/executions/{receipt_id}/manifest.json")
        api = await stack.http.get(
            f"{stack.url}/v1/executions/{receipt_id}/manifest",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
        assert raw.status_code == 200 and raw.content == api.content
        assert raw.headers["content-type"] == "application/json"


async def test_a_key_without_outputs_read_sees_no_output_and_no_manifest(stack: Stack) -> None:
    marker = f"hidden-{uuid.uuid4().hex[:8]}"
    receipt_id = (await stack.execute("demo.echo", {"secretish": marker})).json()["receipt_id"]
    async with signed_in(stack, await new_key(stack, ["execute:*"])) as http:
        page = await http.get(f"/console/executions/{receipt_id}")
        assert page.status_code == 200 and "RUN_STARTED" in page.text
        assert marker not in page.text
        assert "data-manifest-check" not in page.text and "outputs:read" in page.text
        manifest = await http.get(f"/console/executions/{receipt_id}/manifest.json")
        assert manifest.status_code == 403 and "scope_missing" in manifest.text
        assert (await http.get("/console/plans")).status_code == 403
        home = await http.get("/console")
        assert 'href="/console/executions"' in home.text
        assert 'href="/console/plans"' not in home.text


async def test_another_tenants_execution_is_not_found(stack: Stack) -> None:
    receipt_id = (await stack.execute("demo.echo", {"mine": 1})).json()["receipt_id"]
    _, other = await stack.new_tenant()
    async with signed_in(stack, other) as http:
        for path in ("", "/manifest.json"):
            answer = await http.get(f"/console/executions/{receipt_id}{path}")
            assert answer.status_code == 404, path  # as the API answers it
            assert "execution_not_found" in answer.text or "manifest_not_found" in answer.text
        assert receipt_id not in (await http.get("/console/executions")).text


async def test_plans_list_and_steps(stack: Stack) -> None:
    plan = {
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"n": 1}},
            {"id": "b", "capability_id": "demo.echo", "input": {"n": "${steps.a.output.n}"}},
        ]
    }
    made = (await post_plan(stack, plan, key=f"plan-{uuid.uuid4().hex[:8]}")).json()
    async with signed_in(stack, stack.api_key) as http:
        listed = await http.get("/console/plans")
        assert listed.status_code == 200 and made["plan_id"] in listed.text
        page = await http.get(f"/console/plans/{made['plan_id']}")
        assert page.status_code == 200
        for step in made["steps"]:
            assert f'href="/console/executions/{step["receipt_id"]}"' in page.text
        assert (await http.get("/console/plans/plan_nope")).status_code == 404


async def test_held_execution_and_plan_show_what_they_wait_for(
    stack: Stack,
) -> None:
    writer = await new_key(stack, ["policy:write"])
    held = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
    await put_policy(stack, writer, held)
    answer = await stack.execute("demo.echo", {"held": 1}, headers_extra={"Prefer": "wait=0"})
    assert answer.status_code == 202, answer.text
    receipt_id = answer.json()["receipt_id"]
    async with signed_in(stack, stack.api_key) as http:
        for _ in range(100):  # the run records its first events just after the answer
            page = await http.get(f"/console/executions/{receipt_id}")
            if "APPROVAL_REQUESTED" in page.text:
                break
            await asyncio.sleep(0.1)
        assert page.status_code == 200 and "No receipt yet" in page.text
        assert "APPROVAL_REQUESTED" in page.text and "data-manifest-check" not in page.text
        plan = {"steps": [{"id": "a", "capability_id": "demo.echo", "input": {"n": 1}}]}
        held_plan = (await post_plan(stack, plan, key=f"held-{uuid.uuid4().hex[:8]}")).json()
        assert held_plan["status"] == "accepted", held_plan
        shown = await http.get(f"/console/plans/{held_plan['plan_id']}")
        assert held_plan["approval"]["id"] in shown.text and "Waiting for" in shown.text
