"""``POST /v1/plans`` end to end: a plan's steps run in order as executions of their own,
references carry what an earlier step answered, a repeat answers the stored plan, bad
plans are refused before anything runs, and a failure undoes what was done."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import jwt

from schemas.manifest import signing_input
from schemas.names import REPLAYED_HEADER
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


async def post_plan(
    stack: Stack, plan: dict[str, Any], *, key: str | None = None, wait: int = 30
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.api_key}", "Prefer": f"wait={wait}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"schema_version": "1", **plan}
    return await stack.http.post(f"{stack.url}/v1/plans", json=body, headers=headers)


def echo(step_id: str, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "capability_id": "demo.echo", "input": value, **extra}


def echo_plan() -> dict[str, Any]:
    return {
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"n": 1, "name": "first"}},
            {
                "id": "b",
                "capability_id": "demo.echo",
                "input": {"n": "${steps.a.output.n}", "text": "after ${steps.a.output.name}"},
            },
            {
                "id": "c",
                "capability_id": "demo.echo",
                "input": {"x": 1},
                "when": {"step": "b", "status": "failed"},
            },
        ]
    }


async def test_a_plan_runs_its_steps_with_references_and_skips(stack: Stack) -> None:
    key = f"plan-{uuid.uuid4().hex}"
    answer = await post_plan(stack, echo_plan(), key=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "executed"
    steps = {s["id"]: s for s in body["steps"]}
    assert [s["status"] for s in body["steps"]] == ["executed", "executed", "skipped"]
    # A whole-string reference keeps the JSON type; an embedded one becomes text.
    assert steps["b"]["output"] == {"n": 1, "text": "after first"}
    assert steps["c"]["receipt_id"] is None

    # Each step is an execution of its own under <plan key>/<step id>.
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    receipt = await stack.http.get(
        f"{stack.url}/v1/executions/{steps['a']['receipt_id']}", headers=headers
    )
    assert receipt.json()["idempotency_key"] == f"{key}/a"

    again = await post_plan(stack, echo_plan(), key=key)
    assert again.status_code == 200
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.json()["plan_id"] == body["plan_id"]
    assert [s["receipt_id"] for s in again.json()["steps"]] == [
        s["receipt_id"] for s in body["steps"]
    ]

    other = echo_plan()
    other["steps"][0]["input"]["n"] = 2
    reused = await post_plan(stack, other, key=key)
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"

    shown = await stack.http.get(f"{stack.url}/v1/plans/{body['plan_id']}", headers=headers)
    assert shown.status_code == 200
    assert [s["output"] for s in shown.json()["steps"]][:2] == [
        {"n": 1, "name": "first"},
        {"n": 1, "text": "after first"},
    ]


async def test_a_bad_reference_is_refused_before_anything_runs(stack: Stack) -> None:
    plan = echo_plan()
    plan["steps"][0]["input"]["later"] = "${steps.b.output.n}"
    answer = await post_plan(stack, plan)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "plan_invalid"
    assert error["details"]["problems"][0]["step"] == "a"
    assert error["details"]["problems"][0]["reference"] == "${steps.b.output.n}"

    plan = echo_plan()
    plan["steps"][1]["input"]["n"] = "${steps.a.output.missing}"
    answer = await post_plan(stack, plan)
    assert answer.status_code == 400
    assert "missing" in answer.json()["error"]["message"]


async def test_a_failing_step_undoes_what_was_done(stack: Stack, provider: FakeProvider) -> None:
    run = uuid.uuid4().hex
    made = provider.script(f"/made/{run}", Step(status=201, body={"id": 7}))
    undo = provider.script(f"/undo/{run}", Step(status=200))
    broken = provider.script(f"/broken/{run}", Step(status=400, body={"error": "bad"}))
    plan = {
        "on_failure": "compensate",
        "steps": [
            {
                "id": "make",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": made, "json": {"n": 1}},
                "compensate": {
                    "capability_id": "http.request",
                    "input": {
                        "method": "POST",
                        "url": undo,
                        "json": {"id": "${steps.make.output.body.id}"},
                    },
                },
            },
            {
                "id": "break",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": broken, "json": {}},
            },
        ],
    }
    key = f"plan-{run}"
    answer = await post_plan(stack, plan, key=key)
    body = answer.json()
    assert body["status"] == "failed", answer.text
    assert answer.status_code == 502
    assert [s["status"] for s in body["steps"]] == ["compensated", "failed"]
    assert body["error"]["details"]["step"] == "break"
    assert len(provider.calls_to(made.removeprefix(provider.base_url))) == 1
    undone = provider.calls_to(undo.removeprefix(provider.base_url))
    assert len(undone) == 1 and undone[0].body == {"id": 7}

    again = await post_plan(stack, plan, key=key)
    assert again.headers[REPLAYED_HEADER] == "true"
    assert len(provider.calls_to(undo.removeprefix(provider.base_url))) == 1

    # The plan's signed manifest: each call in order, what failed and what was undone.
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    got = await stack.http.get(f"{stack.url}/v1/plans/{body['plan_id']}/manifest", headers=headers)
    assert got.status_code == 200, got.text
    manifest = json.loads(got.content)
    assert manifest["correlation_id"] == body["plan_id"]
    # The calls as they ran, each input as resolved: make, break, then the undo.
    assert [(t["parameters"]["url"], t["result"]["status"]) for t in manifest["tools"]] == [
        (made, "success"),
        (broken, "failure"),
        (undo, "success"),
    ]
    assert manifest["tools"][2]["parameters"]["json"] == {"id": 7}
    outputs = manifest["outputs"]
    assert outputs["partial_completion"] == {"completed_steps": ["make"], "total_steps": 2}
    assert outputs["rolled_back"] == ["make"] and outputs["rollback_required"] is False
    assert outputs["error_code"] == "provider_invalid_input"
    assert outputs["steps"]["break"]["status"] == "failed"
    jwks = (await stack.http.get(f"{stack.url}/.well-known/jwks.json")).json()
    payload = base64.urlsafe_b64encode(signing_input(manifest)).rstrip(b"=").decode()
    [signature] = manifest["signatures"]
    header, _, sig = signature["signature"].split(".")
    kid = json.loads(base64.urlsafe_b64decode(header + "==").decode())["kid"]
    jwt.api_jws.PyJWS().decode_complete(
        f"{header}.{payload}.{sig}",
        key=jwt.PyJWKSet.from_dict(jwks)[kid],
        algorithms=[signature["algorithm"]],
    )
    events = await stack.http.get(f"{stack.url}/v1/plans/{body['plan_id']}/events", headers=headers)
    types = [e["event_type"] for e in events.json()]
    assert types.count("STEP_COMPENSATED") == 1
    assert types[-2:] == ["RUN_FAILED", "SIGNAL_PROCESSING_FAILED"]


async def test_another_tenants_plan_is_not_found(stack: Stack) -> None:
    answer = await post_plan(stack, echo_plan())
    plan_id = answer.json()["plan_id"]
    _, other_key = await stack.new_tenant()
    headers = {"Authorization": f"Bearer {other_key}"}
    for path in ("", "/events", "/manifest"):
        seen = await stack.http.get(f"{stack.url}/v1/plans/{plan_id}{path}", headers=headers)
        assert seen.status_code == 404, (path, seen.text)
    for action in ("resume", "cancel"):
        tried = await stack.http.post(
            f"{stack.url}/v1/plans/{plan_id}/{action}",
            json={"effect_did_not_happen": True} if action == "resume" else {},
            headers=headers,
        )
        assert tried.status_code in (403, 404), (action, tried.text)


async def test_a_failure_a_later_step_waits_for_is_handled(
    stack: Stack, provider: FakeProvider
) -> None:
    run = uuid.uuid4().hex
    broken = provider.script(f"/check/{run}", Step(status=400, body={"error": "down"}))
    plan = {
        "steps": [
            {
                "id": "check",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": broken, "json": {}},
            },
            echo("page", {"to": "on-call"}, when={"step": "check", "status": "failed"}),
            echo("after", {"n": 1}),
        ]
    }
    answer = await post_plan(stack, plan)
    body = answer.json()
    assert answer.status_code == 200, answer.text
    assert body["status"] == "executed" and body["error"] is None
    assert [s["status"] for s in body["steps"]] == ["failed", "executed", "executed"]
    assert body["steps"][0]["error"]["code"] == "provider_invalid_input"


async def test_plans_are_listed_newest_first_by_page_and_status(
    stack: Stack, provider: FakeProvider
) -> None:
    made = []
    for n in range(3):
        answer = await post_plan(stack, {"steps": [echo("a", {"n": n})]})
        made.append(answer.json()["plan_id"])
    failing = {"steps": [echo("a", {"n": 1}), echo("b", {"v": "${steps.a.output.status}"})]}
    failing["steps"][0]["capability_id"] = "http.request"
    refused = provider.script(f"/refused/{uuid.uuid4().hex}", Step(status=400))
    failing["steps"][0]["input"] = {"method": "GET", "url": refused}
    failed = (await post_plan(stack, failing)).json()
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    first = await stack.http.get(f"{stack.url}/v1/plans?limit=2", headers=headers)
    assert first.status_code == 200, first.text
    page = first.json()
    assert [p["plan_id"] for p in page["items"]] == [failed["plan_id"], made[2]]
    assert page["items"][1]["steps"] == {"executed": 1} and page["items"][1]["status"] == "executed"
    rest = await stack.http.get(
        f"{stack.url}/v1/plans", params={"limit": 2, "cursor": page["next_cursor"]}, headers=headers
    )
    assert [p["plan_id"] for p in rest.json()["items"]] == [made[1], made[0]]
    only = await stack.http.get(f"{stack.url}/v1/plans?status=failed", headers=headers)
    [item] = only.json()["items"]
    assert item["plan_id"] == failed["plan_id"]
    assert item["error_code"] == "provider_invalid_input"
    assert item["steps"] == {"failed": 1, "pending": 1}
    _, other_key = await stack.new_tenant()
    theirs = await stack.http.get(
        f"{stack.url}/v1/plans", headers={"Authorization": f"Bearer {other_key}"}
    )
    assert theirs.json()["items"] == []
