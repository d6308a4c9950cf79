"""``bench.plans`` measures what it claims: its plan is valid, the sequential series sends
what the plan's references resolve to, and both series run against a real stack."""

from __future__ import annotations

import random

from bench.plans import (
    ONE,
    PLAN,
    SEQUENCE,
    PlanCalls,
    first_input,
    later_inputs,
    plan_body,
    plan_breakdown,
    run_series,
)
from schemas.capabilities import CapabilityCatalog
from schemas.plans import PlanRequest, references, resolve
from starter.service.plans import check
from tests.support.stack import Stack


def test_the_plan_is_valid_and_the_sequence_sends_what_its_references_resolve_to() -> None:
    request = PlanRequest.model_validate(plan_body(7))
    assert check(request, CapabilityCatalog()) == []
    later = request.steps[1:]
    assert all({step for _, step, _ in references(s.input)} == {"first"} for s in later)
    outputs = {"first": first_input(7)}
    assert [resolve(s.input, outputs) for s in later] == later_inputs(first_input(7))


async def test_both_series_run_against_a_stack(stack: Stack) -> None:
    calls = PlanCalls(stack.http, stack.url, stack.api_key, "smoke")
    report = await run_series(calls, 1, 0, random.Random(1), until=0)
    assert {PLAN, SEQUENCE, ONE} <= set(report["latency"])
    assert report["latency"][PLAN]["n"] == 1 and report["latency"][ONE]["n"] == 3
    assert report["ratio_p50"] > 0
    assert set(calls.workflow_ids) == {PLAN, ONE}
    split = await plan_breakdown(stack.client, calls.plan_workflows)
    assert split["steps_ms"] > 0 and split["plan_activities_ms"] > 0
    assert split["total_ms"] >= split["steps_ms"] + split["plan_activities_ms"]
