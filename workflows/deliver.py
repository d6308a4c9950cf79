"""``DeliverWebhook``: one outbox row to its endpoint, attempt after attempt.

Each attempt is one activity that sends and marks; the activity returns how long to wait
before the next (the subscription's schedule, jitter and ``Retry-After`` are decided there,
where randomness and the clock are allowed), and the workflow sleeps durably in between,
so a worker restart in a multi-hour schedule loses nothing. The workflow id is derived from
the row, so a relay that starts it twice gets the running one."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from schemas.names import ATTEMPT_DELIVERY, DELIVER_WEBHOOK_WORKFLOW
    from schemas.webhooks import AttemptResult, DeliveryInput
    from workflows.fairness import tenant_priority

# The send itself is not retried by Temporal (the activity returns its outcome); these
# retries are for the activity's own faults, e.g. a crash between the send and the mark,
# which re-sends with the same webhook-id.
ATTEMPT_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
ATTEMPT_TIMEOUT = timedelta(seconds=60)
# A worker killed mid-send: the attempt is retried after this, not after ATTEMPT_TIMEOUT.
ATTEMPT_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


@workflow.defn(name=DELIVER_WEBHOOK_WORKFLOW)
class DeliverWebhook:
    @workflow.run
    async def run(self, inp: DeliveryInput) -> AttemptResult:
        while True:
            result: AttemptResult = await workflow.execute_activity(
                ATTEMPT_DELIVERY,
                inp,
                result_type=AttemptResult,
                start_to_close_timeout=ATTEMPT_TIMEOUT,
                heartbeat_timeout=ATTEMPT_HEARTBEAT_TIMEOUT,
                retry_policy=ATTEMPT_RETRY,
                priority=tenant_priority(inp.tenant_id),
            )
            if result.final:
                return result
            await workflow.sleep(timedelta(seconds=result.retry_in_seconds))
