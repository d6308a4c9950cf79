"""``LogCheckpoint``: started by a Temporal Schedule every ``log_checkpoint_interval_seconds``,
sequences every tenant's transparency log and signs a checkpoint of each that grew."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.checkpoints import LogCheckpointInput, LogCheckpointReport
    from schemas.names import LOG_CHECKPOINT, LOG_CHECKPOINT_WORKFLOW


@workflow.defn(name=LOG_CHECKPOINT_WORKFLOW)
class LogCheckpoint:
    @workflow.run
    async def run(self, inp: LogCheckpointInput) -> LogCheckpointReport:
        report: LogCheckpointReport = await workflow.execute_activity(
            LOG_CHECKPOINT,
            inp,
            result_type=LogCheckpointReport,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=5),
        )
        return report
