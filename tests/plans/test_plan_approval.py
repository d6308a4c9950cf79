"""Under a strict policy a plan with a step that needs a person asks once, before its
first step, with an approval bound to the plan's digest; its steps then run without
asking again. A decision naming another digest is refused (409) and changes nothing."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select

from store.models import ApprovalRow
from tests.gateway.test_approvals import decide, strict
from tests.gateway.test_policy import new_key, put_policy
from tests.plans.support import get_plan, plan_action, post_plan, until_done
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack


async def test_one_approval_covers_the_whole_plan(stack: Stack, provider: FakeProvider) -> None:
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict())
    run = uuid.uuid4().hex
    first = provider.script(f"/one/{run}", Step(201, {"id": 1}))
    second = provider.script(f"/two/{run}", Step(201, {"id": 2}))
    plan = {
        "steps": [
            {
                "id": "one",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": first, "json": {"n": 1}},
            },
            {
                "id": "note",
                "capability_id": "demo.echo",
                "input": {"seen": "${steps.one.output.body.id}"},
            },
            {
                "id": "two",
                "capability_id": "http.request",
                "input": {
                    "method": "POST",
                    "url": second,
                    "json": {"after": "${steps.one.output.body.id}"},
                },
            },
        ]
    }
    answer = await post_plan(stack, plan, key=f"plan-{run}", wait=10)
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["status"] == "accepted"
    assert answer.headers["Location"] == f"/v1/plans/{body['plan_id']}"
    approval = body["approval"]
    assert approval["capability_id"] == "moat.plan" and approval["status"] == "pending"
    assert not provider.calls_to(f"/one/{run}")

    approver = await new_key(stack, ["approvals:write", "approvals:read"])
    wrong = await decide(stack, approver, approval, input_hash="sha256:" + "0" * 64)
    assert wrong.status_code == 409, wrong.text
    assert wrong.json()["error"]["code"] == "approval_mismatch"
    assert (await get_plan(stack, body["plan_id"])).json()["status"] == "accepted"

    approved = await decide(stack, approver, approval)
    assert approved.status_code == 200, approved.text
    done = await until_done(stack, body["plan_id"])
    assert done["status"] == "executed", done
    assert [s["status"] for s in done["steps"]] == ["executed"] * 3
    assert len(provider.calls_to(f"/one/{run}")) == 1
    assert [c.body for c in provider.calls_to(f"/two/{run}")] == [{"after": 1}]
    async with stack.sessions() as session:
        asked = await session.scalar(
            select(func.count()).select_from(ApprovalRow).filter_by(tenant_id=stack.tenant_id)
        )
    assert asked == 1  # the steps asked no one again


async def test_a_plan_cancelled_while_it_waits_for_approval_runs_nothing(
    stack: Stack, provider: FakeProvider
) -> None:
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict())
    run = uuid.uuid4().hex
    url = provider.script(f"/never/{run}", Step(201))
    plan = {
        "steps": [
            {
                "id": "one",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": url, "json": {}},
            }
        ]
    }
    answer = await post_plan(stack, plan, key=f"plan-{run}", wait=10)
    assert answer.status_code == 202 and answer.json()["approval"], answer.text
    body = answer.json()
    cancelled = await plan_action(stack, body["plan_id"], "cancel", {"note": "not needed"})
    assert cancelled.status_code in (200, 202), cancelled.text
    done = await until_done(stack, body["plan_id"])
    assert done["error"]["code"] == "plan_cancelled"
    assert [s["status"] for s in done["steps"]] == ["pending"]
    assert not provider.calls_to(f"/never/{run}")
    async with stack.sessions() as session:
        status = await session.scalar(
            select(ApprovalRow.status).filter_by(id=body["approval"]["id"])
        )
    assert status == "expired"


async def test_a_rejected_plan_runs_nothing_and_does_not_resume(
    stack: Stack, provider: FakeProvider
) -> None:
    writer = await new_key(stack, ["policy:write"])
    await put_policy(stack, writer, strict())
    run = uuid.uuid4().hex
    url = provider.script(f"/rejected/{run}", Step(201))
    plan = {
        "steps": [
            {
                "id": "one",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": url, "json": {}},
            }
        ]
    }
    answer = await post_plan(stack, plan, key=f"plan-{run}", wait=10)
    body = answer.json()
    approver = await new_key(stack, ["approvals:write", "approvals:read"])
    rejected = await decide(stack, approver, body["approval"], action="reject")
    assert rejected.status_code == 200, rejected.text
    done = await until_done(stack, body["plan_id"])
    assert done["error"]["code"] == "approval_rejected"
    assert [s["status"] for s in done["steps"]] == ["pending"]
    shown = await get_plan(stack, body["plan_id"])
    assert shown.status_code == 403  # the failing code's status, as the POST answers it
    again = await plan_action(stack, body["plan_id"], "resume", {"effect_did_not_happen": True})
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "plan_not_resumable"
    assert not provider.calls_to(f"/rejected/{run}")
