"""A workflow that queues a tenant's activities on another task queue, each with the
priority Moat gives that tenant's tasks (``workflows.fairness``): the fairness test's load.
Sandbox-friendly: the SDK, the standard library and the helper under test only."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from workflows.fairness import tenant_priority

FAIR_QUEUE_WORKFLOW = "TestFairQueue"
FAIR_QUEUE_ACTIVITY = "test.fair_queue.task"


@dataclass
class QueueInput:
    tenant_id: str
    tasks: int
    activity_queue: str
    # False: no fairness key (what every task carried before), to show the key matters.
    fair: bool = True


@workflow.defn(name=FAIR_QUEUE_WORKFLOW)
class FairQueue:
    @workflow.run
    async def run(self, inp: QueueInput) -> None:
        options = {"priority": tenant_priority(inp.tenant_id)} if inp.fair else {}
        await asyncio.gather(
            *(
                workflow.execute_activity(
                    FAIR_QUEUE_ACTIVITY,
                    f"{inp.tenant_id}:{i}",
                    task_queue=inp.activity_queue,
                    start_to_close_timeout=timedelta(seconds=30),
                    **options,  # type: ignore[arg-type]
                )
                for i in range(inp.tasks)
            )
        )


class Recorder:
    """The activity side: records the order in which tasks were dispatched to it."""

    def __init__(self) -> None:
        self.order: list[str] = []

    @activity.defn(name=FAIR_QUEUE_ACTIVITY)
    async def task(self, name: str) -> None:
        self.order.append(name.partition(":")[0])
        await asyncio.sleep(0.005)
