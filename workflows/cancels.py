"""``SweepCancelledRuns``: started by a Temporal Schedule, records the executions an operator
terminated or cancelled (``activities.cancels``)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.cancels import CancelSweepInput, CancelSweepReport
    from schemas.names import CANCEL_SWEEP_WORKFLOW, SWEEP_CANCELLED


@workflow.defn(name=CANCEL_SWEEP_WORKFLOW)
class SweepCancelledRuns:
    @workflow.run
    async def run(self, inp: CancelSweepInput) -> CancelSweepReport:
        as_of = inp.as_of or workflow.now()
        report: CancelSweepReport = await workflow.execute_activity(
            SWEEP_CANCELLED,
            inp.model_copy(update={"as_of": as_of}),
            result_type=CancelSweepReport,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1), maximum_attempts=5),
        )
        return report
