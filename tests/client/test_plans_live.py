"""``run_plan``, ``get_plan``, ``resume_plan`` and ``cancel_plan`` against a live gateway
and worker, with the async client and the blocking one: a three-step plan whose steps use
earlier outputs, its replay, reading it back, a dry run that leaves the key free, and the
refusals (an invalid plan, a key reused, resume and cancel of a finished plan)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from moat_client import (
    AsyncMoatClient,
    IdempotencyKeyReused,
    InvalidRequest,
    MoatClient,
    MoatError,
    NotFound,
    PlanResult,
    PlanStatus,
)

from tests.support.stack import Stack


def echo_plan(tag: str) -> dict[str, Any]:
    """Three demo.echo steps, each using what the one before it answered."""
    return {
        "steps": [
            {"id": "a", "capability_id": "demo.echo", "input": {"tag": tag, "n": 1}},
            {
                "id": "b",
                "capability_id": "demo.echo",
                "input": {"tag": "${steps.a.output.tag}", "n": "${steps.a.output.n}"},
            },
            {
                "id": "c",
                "capability_id": "demo.echo",
                "input": {"text": "b said ${steps.b.output.tag}"},
            },
        ]
    }


def invalid_plan() -> dict[str, Any]:
    plan = echo_plan("invalid")
    plan["steps"][0]["input"]["later"] = "${steps.b.output.tag}"
    return plan


def check_executed(result: PlanResult, tag: str) -> None:
    assert result.ok and result.http_status == 200 and not result.replayed
    assert result.status == PlanStatus.EXECUTED and result.error is None
    assert [s.status for s in result.steps] == ["executed"] * 3
    assert result.outputs == {
        "a": {"tag": tag, "n": 1},
        "b": {"tag": tag, "n": 1},  # a whole reference keeps the JSON type
        "c": {"text": f"b said {tag}"},
    }
    assert all(s.receipt_id for s in result.steps)


async def test_the_async_client_runs_replays_reads_and_dry_runs_a_plan(stack: Stack) -> None:
    key = f"client-plan-{uuid.uuid4().hex[:12]}"
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        result = await moat.run_plan(echo_plan(key), idempotency_key=key)
        check_executed(result, key)
        # Each step is an ordinary execution, under <plan key>/<step id>.
        step_a = await moat.get_execution(result.step("a").receipt_id or "")
        assert step_a.ok and step_a.envelope.idempotency_key == f"{key}/a"

        again = await moat.run_plan(echo_plan(key), idempotency_key=key)
        assert again.replayed and again.plan_id == result.plan_id
        assert [s.receipt_id for s in again.steps] == [s.receipt_id for s in result.steps]

        shown = await moat.get_plan(result.plan_id)
        assert shown.ok and shown.outputs == result.outputs

        dry_key = f"{key}-dry"
        planned = await moat.run_plan(echo_plan(dry_key), idempotency_key=dry_key, dry_run=True)
        assert planned.status == PlanStatus.PLANNED and not planned.ok
        assert all(s.decision is not None and s.receipt_id is None for s in planned.steps)
        # Nothing ran and the key is still free: the same plan runs for real under it.
        check_executed(await moat.run_plan(echo_plan(dry_key), idempotency_key=dry_key), dry_key)


async def test_the_async_client_raises_the_gateways_refusals(stack: Stack) -> None:
    key = f"client-refused-{uuid.uuid4().hex[:12]}"
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        with pytest.raises(InvalidRequest) as invalid:
            await moat.run_plan(invalid_plan())
        assert invalid.value.http_status == 400 and invalid.value.code == "plan_invalid"
        [problem] = invalid.value.details["problems"]
        assert problem["step"] == "a" and problem["reference"] == "${steps.b.output.tag}"

        done = await moat.run_plan(echo_plan(key), idempotency_key=key)
        with pytest.raises(IdempotencyKeyReused):
            await moat.run_plan(echo_plan("another"), idempotency_key=key)
        with pytest.raises(MoatError) as not_resumable:
            await moat.resume_plan(done.plan_id, effect_did_not_happen=True, note="test")
        assert not_resumable.value.http_status == 409
        assert not_resumable.value.code == "plan_not_resumable"
        with pytest.raises(InvalidRequest) as no_statement:
            await moat.resume_plan(done.plan_id, effect_did_not_happen=False)
        assert no_statement.value.code == "effect_statement_required"
        with pytest.raises(MoatError) as finished:
            await moat.cancel_plan(done.plan_id, note="too late")
        assert finished.value.http_status == 409 and finished.value.code == "plan_finished"
        with pytest.raises(NotFound) as missing:
            await moat.get_plan(str(uuid.uuid4()))
        assert missing.value.code == "plan_not_found"


def blocking(url: str, api_key: str, key: str) -> list[Any]:
    """The blocking client's answers, in order (it runs in a thread: the gateway answers on
    the test's loop)."""
    seen: list[Any] = []
    with MoatClient(url, api_key) as moat:
        result = moat.run_plan({**echo_plan(key), "idempotency_key": key})
        seen += [result, moat.get_plan(result.plan_id)]
        seen.append(moat.run_plan(echo_plan(key), idempotency_key=f"{key}-dry", dry_run=True))
        for refused in (
            lambda: moat.run_plan(invalid_plan()),
            lambda: moat.resume_plan(result.plan_id, effect_did_not_happen=True),
            lambda: moat.cancel_plan(result.plan_id),
        ):
            try:
                refused()
            except MoatError as error:
                seen.append(error)
    return seen


async def test_the_blocking_client_does_the_same(stack: Stack) -> None:
    key = f"client-sync-{uuid.uuid4().hex[:12]}"
    result, shown, planned, invalid, resume, cancel = await asyncio.to_thread(
        blocking, stack.url, stack.api_key, key
    )
    check_executed(result, key)  # the plan's own idempotency_key was its key
    assert result.envelope.idempotency_key == key
    assert shown.ok and shown.plan_id == result.plan_id and shown.outputs == result.outputs
    assert planned.status == "planned"
    assert isinstance(invalid, InvalidRequest) and invalid.code == "plan_invalid"
    assert (resume.http_status, resume.code) == (409, "plan_not_resumable")
    assert (cancel.http_status, cancel.code) == (409, "plan_finished")
