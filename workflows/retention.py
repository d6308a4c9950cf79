"""``ManifestRetention``: started by a Temporal Schedule, removes expired manifests."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.names import EXPIRE_MANIFESTS, RETENTION_WORKFLOW
    from schemas.retention import RetentionInput, RetentionReport


@workflow.defn(name=RETENTION_WORKFLOW)
class ManifestRetention:
    @workflow.run
    async def run(self, inp: RetentionInput) -> RetentionReport:
        as_of = inp.as_of or workflow.now()
        report: RetentionReport = await workflow.execute_activity(
            EXPIRE_MANIFESTS,
            inp.model_copy(update={"as_of": as_of}),
            result_type=RetentionReport,
            start_to_close_timeout=timedelta(minutes=30),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=1), maximum_attempts=5),
        )
        return report
