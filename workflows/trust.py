"""``RefreshTrust``: started every minute by a Temporal Schedule, refreshes the trust
rollup from the outcome events recorded since the last refresh."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.names import REFRESH_TRUST, TRUST_REFRESH_WORKFLOW
    from schemas.probes import TrustRefreshInput, TrustRefreshReport


@workflow.defn(name=TRUST_REFRESH_WORKFLOW)
class RefreshTrust:
    @workflow.run
    async def run(self, inp: TrustRefreshInput) -> TrustRefreshReport:
        report: TrustRefreshReport = await workflow.execute_activity(
            REFRESH_TRUST,
            inp,
            result_type=TrustRefreshReport,
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=5),
        )
        return report
