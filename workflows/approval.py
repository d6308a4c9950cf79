"""A run's wait for a person's decision on its approval, shared by ``ExecuteCapability``
(one call) and ``ExecutePlan`` (a whole plan): what the ``decide_approval`` update's
validator checks, what its handler keeps, and the durable wait until the approval
expires. The workflow class holds the update (Temporal reads handlers off the class) and
hands each part here."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from schemas.approvals import Approval, ApprovalRecorded, ApprovalStatus, ApprovalVerdict
    from schemas.errors import ErrorCode
    from schemas.start import DECISION_NOT_SIGNED

# Records the approval's expiry (the ``record_approval`` step with an ``expire`` verdict).
Expire = Callable[[ApprovalVerdict], Awaitable[ApprovalRecorded]]


class ApprovalGate:
    """The approval a run waits for, and its decision once there is one."""

    def __init__(self, subject: str = "call") -> None:
        self.pending: Approval | None = None
        self.decided: Approval | None = None
        # Set once the run stops waiting: no decision is taken any more.
        self.closing = False
        self._subject = subject

    def check(self, verdict: ApprovalVerdict) -> None:
        """Refused before anything is recorded: a decision for another approval or one no
        longer pending, or on another call (plan) or policy version than the one waiting."""
        pending = self.pending
        if (
            pending is None
            or pending.id != verdict.approval_id
            or self.decided is not None
            or self.closing
            or verdict.action == "expire"
        ):
            raise ApplicationError(
                "the approval is not pending", type=ErrorCode.APPROVAL_NOT_PENDING
            )
        if not verdict.signature:
            # Checked in full (keyring, approver rules) by the activity that records it.
            raise ApplicationError(
                "the decision is not signed by a Moat gateway", type=DECISION_NOT_SIGNED
            )
        if (verdict.input_hash, verdict.policy_version) != (
            pending.input_hash,
            pending.policy_version,
        ):
            raise ApplicationError(
                f"the decision names another {self._subject} or policy version than the "
                "one waiting",
                type=ErrorCode.APPROVAL_MISMATCH,
            )

    def keep(self, recorded: ApprovalRecorded) -> Approval:
        """The approval as the update's decision recorded it; raised (changing nothing in
        the run) when the decision was refused where it is recorded."""
        if recorded.refusal is not None:
            raise ApplicationError(
                f"{recorded.refusal}: the approval was not decided",
                type=recorded.refusal,
                non_retryable=True,
            )
        if self.decided is None and recorded.approval.status != ApprovalStatus.PENDING:
            self.decided = recorded.approval
        return recorded.approval

    async def wait(
        self, requested: Approval, expire: Expire, stop: Callable[[], bool] = lambda: False
    ) -> Approval:
        """Wait, durably, for the decision until ``requested`` expires (or ``stop``, a
        plan's cancel): the timer is the expiry, and an approval nobody decided expires."""
        self.pending = requested
        remaining = requested.expires_at - workflow.now()
        if remaining > timedelta(0):
            with contextlib.suppress(builtins.TimeoutError):
                await workflow.wait_condition(
                    lambda: self.decided is not None or stop(), timeout=remaining
                )
        if self.decided is None:
            await self.expire(expire)
        self.closing = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        assert self.decided is not None
        return self.decided

    async def expire(self, expire: Expire) -> None:
        """No more decisions: once the updates under way have finished, an approval still
        undecided is recorded expired."""
        self.closing = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.decided is None and self.pending is not None:
            recorded = await expire(ApprovalVerdict(approval_id=self.pending.id, action="expire"))
            self.decided = recorded.approval
