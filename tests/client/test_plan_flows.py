"""The client's plan calls without any server: what ``run_plan`` sends (the key once, the
wait), an ``accepted`` plan polled at its ``Location`` until it ends, a plan waiting for a
person returned at once, a failed plan a result (never retried, never raised) whatever its
HTTP status, a refusal raised, and a resume or cancel sent once."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from moat_client import (
    AsyncMoatClient,
    GatewayUnavailable,
    InvalidRequest,
    MoatClient,
    MoatError,
    NotFound,
    PlanStatus,
    RetryPolicy,
)

PLAN_ID = "pln_0194d6c2"
STEPS = [{"id": "a", "capability_id": "demo.echo", "input": {"x": 1}}]
FAST = RetryPolicy(base_delay=0.0, max_delay=0.0, deadline=5.0, poll_interval=0.0)


def envelope(status: str, **extra: object) -> dict[str, object]:
    step = {"id": "a", "status": "executed" if status == "executed" else "pending"}
    step |= {"capability_id": "demo.echo", "receipt_id": "r-a", "output": {"x": 1}}
    return {"plan_id": PLAN_ID, "status": status, "steps": [step], "trace_id": "t"} | extra


Handler = Callable[[httpx.Request], httpx.Response]


class Gateway:
    """Answers in turn, recording each request."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


def client(gateway: Handler) -> MoatClient:
    return MoatClient(
        "http://gateway.test", "moat_k_s", retry=FAST, transport=httpx.MockTransport(gateway)
    )


def test_run_plan_sends_the_plan_and_its_key_once_and_polls_location() -> None:
    gateway = Gateway(
        httpx.Response(
            202, json=envelope("accepted"), headers={"Location": f"/v1/plans/{PLAN_ID}"}
        ),
        httpx.Response(202, json=envelope("accepted")),
        httpx.Response(200, json=envelope("executed")),
    )
    plan = {"steps": STEPS, "idempotency_key": "in-body"}
    with client(gateway) as moat:
        result = moat.run_plan(plan, idempotency_key="given", wait_seconds=3)
    assert result.ok and result.status == PlanStatus.EXECUTED and result.plan_id == PLAN_ID
    assert result.outputs == {"a": {"x": 1}} and result.step("a").receipt_id == "r-a"
    post, *polls = gateway.requests
    body = json.loads(post.content)
    assert body == {"schema_version": "1", "steps": STEPS}  # the key given replaces the body's
    assert post.headers["Idempotency-Key"] == "given" and post.headers["Prefer"] == "wait=3"
    assert [(r.method, r.url.path) for r in polls] == [("GET", f"/v1/plans/{PLAN_ID}")] * 2
    assert plan == {"steps": STEPS, "idempotency_key": "in-body"}  # not changed


def test_without_a_key_given_the_plans_own_is_kept_and_a_dry_run_is_asked() -> None:
    gateway = Gateway(httpx.Response(200, json=envelope("planned")))
    with client(gateway) as moat:
        result = moat.run_plan({"steps": STEPS, "idempotency_key": "mine"}, dry_run=True)
    assert result.status == "planned"
    body = json.loads(gateway.requests[0].content)
    assert body["idempotency_key"] == "mine" and body["dry_run"] is True
    assert "Idempotency-Key" not in gateway.requests[0].headers


def test_a_plan_waiting_for_a_person_is_returned_at_once() -> None:
    approval = {
        "id": "apr_1",
        "status": "pending",
        "input_hash": "h",
        "capability_id": "plan",
        "capability_version": "1",
        "policy_version": 2,
        "expires_at": "2026-11-27T23:00:00Z",
    }
    gateway = Gateway(httpx.Response(202, json=envelope("accepted", approval=approval)))
    with client(gateway) as moat:
        result = moat.run_plan({"steps": STEPS})
    assert result.status == "accepted" and result.approval is not None
    assert result.approval.id == "apr_1" and len(gateway.requests) == 1


def test_at_the_deadline_the_plan_is_returned_still_accepted() -> None:
    def always_accepted(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202, json=envelope("accepted"), headers={"Retry-After": "1"})

    retry = RetryPolicy(deadline=0.5)
    with MoatClient(
        "http://gateway.test", "k", retry=retry, transport=httpx.MockTransport(always_accepted)
    ) as moat:
        result = moat.run_plan({"steps": STEPS})
    assert result.status == "accepted" and not result.ok


@pytest.mark.parametrize("status", [403, 502])
def test_a_failed_plan_is_a_result_whatever_its_status_and_not_sent_again(status: int) -> None:
    error = {"code": "provider_server_error", "message": "boom", "details": {}}
    gateway = Gateway(httpx.Response(status, json=envelope("failed", error=error)))
    with client(gateway) as moat:
        result = moat.run_plan({"steps": STEPS}, idempotency_key="k")
    assert result.status == "failed" and result.http_status == status
    assert result.error is not None and result.error.code == "provider_server_error"
    assert len(gateway.requests) == 1


def test_a_proxys_502_is_sent_again_with_the_same_key() -> None:
    gateway = Gateway(
        httpx.Response(502, text="bad gateway"), httpx.Response(200, json=envelope("executed"))
    )
    with client(gateway) as moat:
        assert moat.run_plan({"steps": STEPS}, idempotency_key="k").ok
    assert [r.headers["Idempotency-Key"] for r in gateway.requests] == ["k", "k"]


def test_a_refusal_is_raised_with_its_problems() -> None:
    problems = [
        {"step": "b", "where": "input", "reference": "${steps.c.output}", "message": "later"}
    ]
    refused = {
        "trace_id": "t",
        "error": {"code": "plan_invalid", "message": "invalid", "details": {"problems": problems}},
    }
    with (
        client(Gateway(httpx.Response(400, json=refused))) as moat,
        pytest.raises(InvalidRequest) as raised,
    ):
        moat.run_plan({"steps": STEPS})
    assert raised.value.code == "plan_invalid" and raised.value.details["problems"] == problems
    missing = {"trace_id": "t", "error": {"code": "plan_not_found", "message": "no", "details": {}}}
    with client(Gateway(httpx.Response(404, json=missing))) as moat:
        with pytest.raises(NotFound):
            moat.get_plan(PLAN_ID)
        with pytest.raises(ValueError, match="plan_id"):
            moat.get_plan("..")


def test_resume_and_cancel_are_sent_once() -> None:
    refused = {
        "trace_id": "t",
        "error": {"code": "plan_finished", "message": "done", "details": {}},
    }
    gateway = Gateway(
        httpx.Response(202, json=envelope("accepted")),
        httpx.Response(409, json=refused),
        httpx.Response(503, text="busy"),
    )
    with client(gateway) as moat:
        resumed = moat.resume_plan(PLAN_ID, effect_did_not_happen=True, note="checked")
        assert resumed.status == "accepted"
        with pytest.raises(MoatError) as finished:
            moat.cancel_plan(PLAN_ID, note="stop")
        assert finished.value.code == "plan_finished" and finished.value.http_status == 409
        with pytest.raises(GatewayUnavailable):
            moat.cancel_plan(PLAN_ID)
    sent = [(r.url.path, json.loads(r.content)) for r in gateway.requests]
    assert sent == [
        (f"/v1/plans/{PLAN_ID}/resume", {"effect_did_not_happen": True, "note": "checked"}),
        (f"/v1/plans/{PLAN_ID}/cancel", {"note": "stop"}),
        (f"/v1/plans/{PLAN_ID}/cancel", {"note": ""}),
    ]


async def test_the_async_client_runs_a_plan_the_same_way() -> None:
    gateway = Gateway(
        httpx.Response(
            202, json=envelope("accepted"), headers={"Location": f"/v1/plans/{PLAN_ID}"}
        ),
        httpx.Response(
            200, json=envelope("executed"), headers={"X-Moat-Idempotent-Replayed": "true"}
        ),
        httpx.Response(200, json=envelope("executed")),
        httpx.Response(202, json=envelope("accepted")),
        httpx.Response(202, json=envelope("accepted")),
    )
    async with AsyncMoatClient(
        "http://gateway.test", "k", retry=FAST, transport=httpx.MockTransport(gateway)
    ) as moat:
        result = await moat.run_plan({"steps": STEPS}, idempotency_key="k")
        assert result.ok and result.replayed
        assert (await moat.get_plan(PLAN_ID)).ok
        assert (await moat.resume_plan(PLAN_ID, effect_did_not_happen=True)).status == "accepted"
        assert (await moat.cancel_plan(PLAN_ID)).status == "accepted"
    assert [r.method for r in gateway.requests] == ["POST", "GET", "GET", "POST", "POST"]
