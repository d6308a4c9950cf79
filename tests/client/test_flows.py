"""The client's decisions, step by step, without any server: the flow every client drives
yields what to send or how long to sleep, and is handed each answer. What is retried, how
long it waits, and when it stops."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from moat_client import (
    ApprovalRequired,
    ExecutionPending,
    GatewayUnavailable,
    RetryPolicy,
)
from moat_client._flows import Call, Flow, Reply, Sleep, execute

POST = Call("POST", "/v1/executions", json={"input": {}}, headers={"Idempotency-Key": "k"})
RECEIPT = "0194d6c2-0000-7000-8000-000000000000"


def envelope(status: str, **extra: Any) -> dict[str, Any]:
    return {"receipt_id": RECEIPT, "trace_id": "t", "status": status, **extra}


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    if body is None:
        return httpx.Response(status, headers=headers, text="busy")
    return httpx.Response(status, json=body, headers=headers)


def steps(flow: Flow[Any], replies: list[Reply]) -> tuple[list[Call | Sleep], Any]:
    """Drive ``flow``: each Call gets the next reply; returns the steps and the result."""
    taken: list[Call | Sleep] = []
    reply: Reply = None
    try:
        while True:
            step = flow.send(reply)
            taken.append(step)
            reply = replies.pop(0) if isinstance(step, Call) else None
    except StopIteration as done:
        return taken, done.value


def sleeps(taken: list[Call | Sleep]) -> list[float]:
    return [s.seconds for s in taken if isinstance(s, Sleep)]


def test_retries_resend_the_same_request_with_capped_jittered_backoff() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0, deadline=3600, rng=random.Random(7))
    replies: list[Reply] = [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        answer(500, {"trace_id": "t", "error": {"code": "gateway_error", "message": "x"}}),
        answer(502),  # a proxy's 502: no receipt
        answer(504),
        answer(200, envelope("executed")),
    ]
    taken, result = steps(execute(POST, policy, "k", poll=True), replies)
    assert [s for s in taken if isinstance(s, Call)] == [POST] * 6
    waits = sleeps(taken)
    steps_up = [1.0, 2.0, 4.0, 4.0, 4.0]  # doubling, capped at max_delay
    assert all(step / 2 <= wait <= step for wait, step in zip(waits, steps_up, strict=True))
    assert result.ok


def test_retry_after_is_honoured() -> None:
    replies: list[Reply] = [
        answer(503, headers={"Retry-After": "3"}),
        answer(200, envelope("executed")),
    ]
    taken, _ = steps(execute(POST, RetryPolicy(max_delay=10), "k", poll=True), replies)
    assert sleeps(taken) == [3.0]


def test_a_recorded_provider_failure_is_a_result_not_retried() -> None:
    failed = envelope("failed", error={"code": "provider_server_error", "message": "x"})
    taken, result = steps(execute(POST, RetryPolicy(), "k", poll=True), [answer(502, failed)])
    assert (
        len(taken) == 1
        and result.status == "failed"
        and result.error.code == "provider_server_error"
    )


def test_giving_up_names_the_key() -> None:
    policy = RetryPolicy(base_delay=0.01, max_attempts=3)
    replies: list[Reply] = [httpx.ConnectError("refused")] * 3
    with pytest.raises(GatewayUnavailable) as gave_up:
        steps(execute(POST, policy, "k", poll=True), replies)
    assert gave_up.value.idempotency_key == "k" and gave_up.value.http_status == 0


def test_accepted_is_polled_at_location_after_retry_after() -> None:
    location = {"Location": f"/v1/executions/{RECEIPT}", "Retry-After": "2"}
    replies: list[Reply] = [
        answer(202, envelope("accepted"), location),
        answer(202, envelope("accepted"), location),
        answer(200, envelope("executed")),
    ]
    taken, result = steps(execute(POST, RetryPolicy(), "k", poll=True), replies)
    calls = [s for s in taken if isinstance(s, Call)]
    assert calls[0] == POST and [c.url for c in calls[1:]] == [location["Location"]] * 2
    assert all(c.method == "GET" for c in calls[1:]) and sleeps(taken) == [2.0, 2.0]
    assert result.ok


def test_a_location_elsewhere_is_not_followed_with_the_key() -> None:
    elsewhere = {"Location": "https://elsewhere.example/v1/executions/x", "Retry-After": "0"}
    replies: list[Reply] = [
        answer(202, envelope("accepted"), elsewhere),
        answer(200, envelope("executed")),
    ]
    taken, _ = steps(execute(POST, RetryPolicy(), "k", poll=True), replies)
    assert [s.url for s in taken if isinstance(s, Call)][1] == f"/v1/executions/{RECEIPT}"


def test_still_running_at_the_deadline_is_pending_with_its_receipt() -> None:
    replies: list[Reply] = [answer(202, envelope("accepted"), {"Retry-After": "5"})]
    with pytest.raises(ExecutionPending) as pending:
        steps(execute(POST, RetryPolicy(deadline=1.0), "k", poll=True), replies)
    assert pending.value.code == "execution_pending" and pending.value.receipt_id == RECEIPT
    assert not isinstance(pending.value, ApprovalRequired)


def test_waiting_for_approval_is_raised_at_once() -> None:
    approval = {
        "id": "apr_1",
        "status": "pending",
        "input_hash": "sha256:ab",
        "capability_id": "http.request",
        "capability_version": "1.0.0",
        "policy_version": 3,
        "expires_at": "2026-11-27T00:00:00Z",
    }
    replies: list[Reply] = [answer(202, envelope("accepted", approval=approval))]
    with pytest.raises(ApprovalRequired) as waiting:
        steps(execute(POST, RetryPolicy(), "k", poll=True), replies)
    assert waiting.value.code == "approval_required" and waiting.value.receipt_id == RECEIPT
    held = waiting.value.approval
    assert held is not None and (held.id, held.input_hash, held.policy_version) == (
        "apr_1",
        "sha256:ab",
        3,
    )
    assert waiting.value.details["approval_id"] == "apr_1"


def test_without_polling_accepted_is_the_answer() -> None:
    replies: list[Reply] = [answer(202, envelope("accepted"))]
    taken, result = steps(execute(POST, RetryPolicy(), "k", poll=False), replies)
    assert len(taken) == 1 and result.status == "accepted"
