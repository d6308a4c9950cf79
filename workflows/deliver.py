"""``DeliverWebhook``: one outbox row to its endpoint, attempt after attempt.

Each attempt is one activity that sends and marks; the activity returns how long to wait
before the next (the subscription's schedule, jitter and ``Retry-After`` are decided there,
where randomness and the clock are allowed), and the workflow sleeps durably in between,
so a worker restart in a multi-hour schedule loses nothing. The workflow id is derived from
the row, so a relay that starts it twice gets the running one.

Nothing here retries for ever: the activity counts every send it completes and dead-letters
the row past the subscription's ``max_retries``; an attempt that cannot complete at all (a
worker lost mid-send each time, Postgres away) is retried by Temporal a bounded number of
times, then counted and dead-lettered by ``GIVE_UP_DELIVERY``."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from schemas.names import ATTEMPT_DELIVERY, DELIVER_WEBHOOK_WORKFLOW, GIVE_UP_DELIVERY
    from schemas.webhooks import AttemptResult, DeliveryGiveUp, DeliveryInput
    from workflows.fairness import tenant_priority

# The send itself is not retried by Temporal (the activity returns its outcome, within the
# delivery deadline); these retries are for the activity's own faults, e.g. a crash between
# the send and the mark, which re-sends with the same webhook-id. Bounded: about a minute and
# a half of backoff, enough for a database restart.
ATTEMPT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
)
# Above the longest delivery deadline (45 s) plus the attempt's two short transactions.
ATTEMPT_TIMEOUT = timedelta(seconds=60)
# A worker killed mid-send: the attempt is retried after this, not after ATTEMPT_TIMEOUT.
ATTEMPT_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Dead-lettering only writes to Postgres; it outlasts a longer outage (about an hour).
GIVE_UP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
    maximum_attempts=20,
)
GIVE_UP_TIMEOUT = timedelta(seconds=30)


@workflow.defn(name=DELIVER_WEBHOOK_WORKFLOW)
class DeliverWebhook:
    @workflow.run
    async def run(self, inp: DeliveryInput) -> AttemptResult:
        while True:
            try:
                result: AttemptResult = await workflow.execute_activity(
                    ATTEMPT_DELIVERY,
                    inp,
                    result_type=AttemptResult,
                    start_to_close_timeout=ATTEMPT_TIMEOUT,
                    heartbeat_timeout=ATTEMPT_HEARTBEAT_TIMEOUT,
                    retry_policy=ATTEMPT_RETRY,
                    priority=tenant_priority(inp.tenant_id),
                )
            except ActivityError as err:
                return await self._give_up(inp, err)
            if result.final:
                return result
            await workflow.sleep(timedelta(seconds=result.retry_in_seconds))

    async def _give_up(self, inp: DeliveryInput, err: ActivityError) -> AttemptResult:
        give_up = DeliveryGiveUp(
            tenant_id=inp.tenant_id,
            outbox_id=inp.outbox_id,
            generation=inp.generation,
            error=f"{ATTEMPT_RETRY.maximum_attempts} tries failed, the last with {_why(err)}",
        )
        result: AttemptResult = await workflow.execute_activity(
            GIVE_UP_DELIVERY,
            give_up,
            result_type=AttemptResult,
            start_to_close_timeout=GIVE_UP_TIMEOUT,
            retry_policy=GIVE_UP_RETRY,
            priority=tenant_priority(inp.tenant_id),
        )
        return result


def _why(err: ActivityError) -> str:
    """The failure's kind, never its text (which may quote a URL's secret or a query's
    parameters)."""
    cause = err.cause
    if isinstance(cause, TimeoutError):
        if cause.type is None:
            return "a timeout"
        return f"a {cause.type.name.lower().replace('_', '-')} timeout"
    if isinstance(cause, ApplicationError):
        return cause.type or "an error"
    return type(cause).__name__ if cause is not None else "an error"
