"""``OutcomePartitions``: started by a Temporal Schedule, creates next months' partitions of
``outcome_events`` before their first row."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.names import ENSURE_PARTITIONS, PARTITIONS_WORKFLOW
    from schemas.partitions import PartitionsInput, PartitionsReport


@workflow.defn(name=PARTITIONS_WORKFLOW)
class OutcomePartitions:
    @workflow.run
    async def run(self, inp: PartitionsInput) -> PartitionsReport:
        as_of = inp.as_of or workflow.now()
        report: PartitionsReport = await workflow.execute_activity(
            ENSURE_PARTITIONS,
            inp.model_copy(update={"as_of": as_of}),
            result_type=PartitionsReport,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1), maximum_attempts=10),
        )
        return report
