"""Task-queue fairness: one tenant's backlog does not queue another tenant's tasks behind it.

The dev server the suite (and ``moat up``) starts has ``matching.enableFairness`` on, and
every task Moat schedules carries its tenant's fairness key (``workflows.fairness``). With
a worker of one activity slot, tenant A's 40 queued tasks and then tenant B's 4: B's are
dispatched among the first few, not after A's backlog drains (which is what happens
without the key, or without the server flag: first come, first served)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from schemas.run import workflow_id_for
from tests.support.stack import StackFactory
from tests.workflows.fair_queue import FAIR_QUEUE_WORKFLOW, FairQueue, QueueInput, Recorder

A_TASKS, B_TASKS = 40, 4


async def _scheduled(handle: WorkflowHandle[object, object], count: int) -> None:
    """Wait until the workflow has scheduled ``count`` activities (they are backlogged)."""
    for _ in range(200):
        described = await handle.describe()
        if len(described.raw_description.pending_activities) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id} never scheduled {count} activities")


async def _dispatch_order(client: Client, fair: bool) -> list[str]:
    queue = f"fair-{uuid.uuid4().hex}"
    activity_queue = f"{queue}-activities"
    recorder = Recorder()
    handles = []
    async with Worker(client, task_queue=queue, workflows=[FairQueue]):
        for tenant, tasks in (("tenant-a", A_TASKS), ("tenant-b", B_TASKS)):
            handle = await client.start_workflow(
                FAIR_QUEUE_WORKFLOW,
                QueueInput(tenant, tasks, activity_queue, fair),
                id=f"{queue}-{tenant}",
                task_queue=queue,
            )
            await _scheduled(handle, tasks)
            handles.append(handle)
        # Only now a worker polls the activities, one at a time: all of them are backlogged.
        async with Worker(
            client,
            task_queue=activity_queue,
            activities=[recorder.task],
            max_concurrent_activities=1,
        ):
            await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 60)
    return recorder.order


async def test_a_tenants_backlog_does_not_delay_another_tenant(
    temporal: WorkflowEnvironment,
) -> None:
    order = await _dispatch_order(temporal.client, fair=True)
    last_b = max(i for i, tenant in enumerate(order) if tenant == "tenant-b")
    # Turn by turn (one partition): B's 4 tasks go out among the first 8, not after A's 40.
    assert last_b < 2 * B_TASKS + 2, "".join(t[-1] for t in order)


async def test_without_a_fairness_key_it_is_first_come_first_served(
    temporal: WorkflowEnvironment,
) -> None:
    """The control: the same load without keys waits behind A's backlog, so the test above
    measures the key (and the server's flag), not chance."""
    order = await _dispatch_order(temporal.client, fair=False)
    first_b = min(i for i, tenant in enumerate(order) if tenant == "tenant-b")
    assert first_b >= A_TASKS // 2, "".join(t[-1] for t in order)


@pytest.mark.parametrize("local_activities", [True, False])
async def test_every_task_of_an_execution_carries_its_tenants_key(
    make_stack: StackFactory, local_activities: bool
) -> None:
    """The start (with the tenant's weight) and every activity task: the adapter's, and the
    bookkeeping steps' when they are regular activities."""
    async with make_stack(local_activities=local_activities) as stack:
        key = f"fair-{uuid.uuid4().hex}"
        answered = await stack.execute("demo.echo", {"message": "hi"}, key=key)
        assert answered.status_code == 200, answered.text
        handle = stack.client.get_workflow_handle(workflow_id_for(stack.tenant_id, key))
        history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.priority.fairness_key == stack.tenant_id
    assert started.priority.fairness_weight == pytest.approx(1.0)
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    # policy and adapter (which records a success, with the manifest)
    assert len(scheduled) == (1 if local_activities else 2)
    assert all(s.priority.fairness_key == stack.tenant_id for s in scheduled)
