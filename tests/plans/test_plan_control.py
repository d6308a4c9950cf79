"""Stopping and previewing plans: a cancel (the API's, or Temporal's) lets the step under
way finish and starts no later one, ending with ``RUN_CANCELLED``; a dry run answers each
step's policy decision, runs nothing and takes no key; a worker killed mid-plan repeats
no step."""

from __future__ import annotations

import asyncio
import signal
import uuid
from typing import Any

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog
from tests.activities.test_cancel_sweep import sweep
from tests.plans.support import events_of, get_plan, plan_action, post_plan, until_done
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory, http_variant, worker_env
from tests.workflows.test_crash import spawn_worker


def slow_then_fast(provider: FakeProvider, run: str, delay: float = 2.0) -> dict[str, Any]:
    slow = provider.script(f"/slow/{run}", Step(201, {"id": 1}, delay=delay))
    fast = provider.script(f"/fast/{run}", Step(201, {"id": 2}))
    return {
        "steps": [
            {
                "id": "slow",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": slow, "json": {"n": 1}},
            },
            {
                "id": "fast",
                "capability_id": "http.request",
                "input": {"method": "POST", "url": fast, "json": {"n": 2}},
            },
        ]
    }


async def _until_called(provider: FakeProvider, path: str) -> None:
    for _ in range(200):
        if provider.calls_to(path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never called")


async def test_cancel_lets_the_running_step_finish_and_starts_no_more(
    stack: Stack, provider: FakeProvider
) -> None:
    run = uuid.uuid4().hex
    answer = await post_plan(stack, slow_then_fast(provider, run), key=f"c-{run}", wait=0)
    assert answer.status_code == 202, answer.text
    plan_id = answer.json()["plan_id"]
    await _until_called(provider, f"/slow/{run}")
    cancelled = await plan_action(stack, plan_id, "cancel", {"note": "wrong customer"})
    assert cancelled.status_code == 202, cancelled.text
    done = await until_done(stack, plan_id)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "plan_cancelled"
    assert "wrong customer" in done["error"]["message"]
    assert [s["status"] for s in done["steps"]] == ["executed", "pending"]
    assert len(provider.calls_to(f"/slow/{run}")) == 1
    assert not provider.calls_to(f"/fast/{run}")
    types = [e.event_type.value for e in await events_of(stack, plan_id)]
    assert "RUN_CANCELLED" in types and types[-1] == "SIGNAL_PROCESSING_FAILED"

    again = await plan_action(stack, plan_id, "cancel", {})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "plan_finished"


async def test_a_temporal_cancel_stops_the_plan_the_same_way(
    stack: Stack, provider: FakeProvider
) -> None:
    run = uuid.uuid4().hex
    answer = await post_plan(stack, slow_then_fast(provider, run), key=f"t-{run}", wait=0)
    body = answer.json()
    await _until_called(provider, f"/slow/{run}")
    await stack.client.get_workflow_handle(body["workflow_id"]).cancel()
    done = await until_done(stack, body["plan_id"])
    assert done["error"]["code"] == "plan_cancelled"
    assert [s["status"] for s in done["steps"]] == ["executed", "pending"]
    assert not provider.calls_to(f"/fast/{run}")


async def test_a_dry_run_previews_every_step_and_runs_nothing(
    stack: Stack, provider: FakeProvider
) -> None:
    run = uuid.uuid4().hex
    plan = slow_then_fast(provider, run, delay=0)
    key = f"d-{run}"
    answer = await post_plan(stack, {**plan, "dry_run": True}, key=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "planned"
    assert [s["decision"]["decision"] for s in body["steps"]] == ["allow", "allow"]
    assert not provider.calls_to(f"/slow/{run}")
    shown = await get_plan(stack, body["plan_id"])
    assert shown.json()["status"] == "planned"
    # The key was not taken: the plan itself runs under it.
    real = await post_plan(stack, plan, key=key)
    assert real.json()["status"] == "executed", real.text
    assert real.json()["plan_id"] != body["plan_id"]


SHORT = http_variant("test.short", timeout_seconds=2.0, max_retries=3, base_delay_seconds=0.1)


async def test_a_worker_killed_mid_plan_repeats_no_step(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    catalog = CapabilityCatalog((*BUILTIN_CAPABILITIES, SHORT))
    run = uuid.uuid4().hex
    first_url = provider.script(f"/first/{run}", Step(201, {"id": 1}))
    mid_url = provider.script(f"/mid/{run}", Step(200, {"sent": True}, delay=1.0))
    last_url = provider.script(f"/last/{run}", Step(201, {"id": 3}))
    plan = {
        "steps": [
            {
                "id": s,
                "capability_id": "test.short",
                "input": {"method": "POST", "url": u, "json": {}},
            }
            for s, u in (("first", first_url), ("mid", mid_url), ("last", last_url))
        ]
    }
    async with make_stack(
        catalog=catalog, with_worker=False, http_allow_hosts=[provider.allow_entry]
    ) as stack:
        env = worker_env(stack, provider)
        worker = spawn_worker(env)
        request = asyncio.create_task(post_plan(stack, plan, key=f"k-{run}", wait=60))
        try:
            await _until_called(provider, f"/mid/{run}")
            worker.send_signal(signal.SIGKILL)  # mid-call: the provider is still answering
            worker.wait(10)
            worker = spawn_worker(env)
            answer = await asyncio.wait_for(request, 90)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(20)
    assert answer.status_code == 200, answer.text
    assert [s["status"] for s in answer.json()["steps"]] == ["executed"] * 3
    assert len(provider.effects_on(f"/first/{run}")) == 1
    assert len(provider.effects_on(f"/mid/{run}")) == 1  # the provider deduped the retry
    assert len(provider.effects_on(f"/last/{run}")) == 1


async def test_a_terminated_plan_is_swept_cancelled(stack: Stack, provider: FakeProvider) -> None:
    """``temporal workflow terminate`` runs no plan code: the cancel sweep ends the plan
    ``plan_cancelled`` with ``RUN_CANCELLED`` (who and why), as it does an execution."""
    run = uuid.uuid4().hex
    answer = await post_plan(stack, slow_then_fast(provider, run), key=f"x-{run}", wait=0)
    body = answer.json()
    await _until_called(provider, f"/slow/{run}")
    await stack.client.get_workflow_handle(body["workflow_id"]).terminate(reason="ops: wrong plan")
    await sweep(stack, body["plan_id"])
    shown = (await get_plan(stack, body["plan_id"])).json()
    assert shown["status"] == "failed"
    assert shown["error"]["code"] == "plan_cancelled"
    assert "ops: wrong plan" in shown["error"]["message"]
    types = [e.event_type.value for e in await events_of(stack, body["plan_id"])]
    assert types[-2:] == ["RUN_CANCELLED", "SIGNAL_PROCESSING_FAILED"]
    # Swept again: nothing more.
    await sweep(stack)
    again = [e.event_type.value for e in await events_of(stack, body["plan_id"])]
    assert again == types
