"""``AnnounceAlert``: sends one operations alert (a dead letter, an ``outcome_unknown``, a
connection needing re-auth) as a normal execution, ``ExecuteCapability`` as a child, like an
approval's announcement.

Started by the steps where the events are born (``activities.alerts.Alerter``) under an id
derived from the event; the child's idempotency key is the event's too
(``alert/<kind>/<event id>``), so a repeated hand-off, a retried step or a reset run sends
one alert per event.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.alerts import AlertInput
    from schemas.names import ANNOUNCE_ALERT_WORKFLOW, PREPARE_ALERT
    from schemas.slack_approvals import AnnounceResult, AnnounceStart
    from workflows.announce import execute_prepared
    from workflows.fairness import tenant_priority


@workflow.defn(name=ANNOUNCE_ALERT_WORKFLOW)
class AnnounceAlert:
    @workflow.run
    async def run(self, inp: AlertInput) -> AnnounceResult:
        start: AnnounceStart = await workflow.execute_activity(
            PREPARE_ALERT,
            inp,
            result_type=AnnounceStart,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10), maximum_attempts=5),
            priority=tenant_priority(inp.tenant_id),
        )
        return await execute_prepared(start)
