"""The baseline: a bare Temporal workflow with Moat's four steps (policy, adapter, record,
manifest) as trivial activities, so the bench can tell Temporal's own cost from Moat's.

Sandbox-friendly on purpose: only the SDK and the standard library, so the workflow sandbox
re-imports nothing heavy per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

BARE_WORKFLOW = "BenchBareSteps"
_TIMEOUT = timedelta(seconds=15)
_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3)


@dataclass
class BareInput:
    """``local``: policy, record and manifest run as local activities, as in Moat's local
    mode; the adapter call is always a regular activity."""

    payload: str
    local: bool = False


@activity.defn(name="bench.policy")
async def policy(payload: str) -> str:
    return payload


@activity.defn(name="bench.adapter")
async def adapter(payload: str) -> str:
    return payload


@activity.defn(name="bench.record")
async def record(payload: str) -> str:
    return payload


@activity.defn(name="bench.manifest")
async def manifest(payload: str) -> str:
    return payload


ACTIVITIES = [policy, adapter, record, manifest]


@workflow.defn(name=BARE_WORKFLOW)
class BareSteps:
    @workflow.run
    async def run(self, inp: BareInput) -> str:
        checked = await self._bookkeeping("bench.policy", inp.payload, inp.local)
        called: str = await workflow.execute_activity(
            "bench.adapter", checked, result_type=str, start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
        )  # fmt: skip
        recorded = await self._bookkeeping("bench.record", called, inp.local)
        return await self._bookkeeping("bench.manifest", recorded, inp.local)

    async def _bookkeeping(self, name: str, payload: str, local: bool) -> str:
        if local:
            return await workflow.execute_local_activity(
                name, payload, result_type=str, start_to_close_timeout=_TIMEOUT,
                retry_policy=_RETRY,
            )  # fmt: skip
        return await workflow.execute_activity(
            name, payload, result_type=str, start_to_close_timeout=_TIMEOUT, retry_policy=_RETRY
        )


FLOOR_WORKFLOW = "BenchBareFloor"


@workflow.defn(name=FLOOR_WORKFLOW)
class BareFloor:
    """The floor any execution pays on Temporal: one workflow task round trip and one
    activity (the adapter call), nothing else."""

    @workflow.run
    async def run(self, inp: BareInput) -> str:
        called: str = await workflow.execute_activity(
            "bench.adapter", inp.payload, result_type=str, start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
        )  # fmt: skip
        return called
