"""What one execute call, or one plans call, answers, as the client hands it to the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moat_client.models import (
    ApprovalRef,
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    PlanEnvelope,
    PlanStatus,
    PlanStep,
    Receipt,
)

REPLAYED_HEADER = "X-Moat-Idempotent-Replayed"
# The standard name (IETF Idempotency-Key draft, Agentic Commerce Protocol) of the same fact.
STANDARD_REPLAYED_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one execute call: ``executed`` (``ok``), ``failed`` downstream (the
    provider refused: ``error``, with a receipt), ``planned`` (a dry run) or, when polling
    was turned off, ``accepted``."""

    http_status: int
    envelope: Envelope
    # The stored receipt of an earlier request answered (``envelope.replayed``); a run
    # this call waited for is never a replay, even one an earlier attempt started.
    replayed: bool

    @property
    def status(self) -> EnvelopeStatus:
        """``executed``, ``failed``, ``planned`` or ``accepted``."""
        return self.envelope.status

    @property
    def receipt_id(self) -> str | None:
        """The execution's receipt id (None only for an answer without one)."""
        return self.envelope.receipt_id

    @property
    def receipt(self) -> Receipt | None:
        """The receipt (hashes only), once the run has recorded one."""
        return self.envelope.receipt

    @property
    def output(self) -> Any:
        """The adapter's redacted result (``executed`` only; None once no longer kept)."""
        return self.envelope.output

    @property
    def error(self) -> ErrorBody | None:
        """Why the provider refused (``code``, ``message``, ``details``), for ``failed``."""
        return self.envelope.error

    @property
    def ok(self) -> bool:
        """Whether the capability ran (``executed``)."""
        return self.envelope.status == EnvelopeStatus.EXECUTED

    @property
    def approval(self) -> ApprovalRef | None:
        """The approval an ``accepted`` run waits for (None when it waits for nothing)."""
        return self.envelope.approval


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one plans call: ``executed`` (``ok``: every step executed or was
    skipped), ``failed`` (``error`` is the failing step's, each step says how it ended),
    ``planned`` (a dry run: each step's policy ``decision``) or ``accepted`` (still running,
    or waiting for the ``approval`` of the whole plan)."""

    http_status: int
    envelope: PlanEnvelope
    # The stored answer of an earlier request under the same key.
    replayed: bool

    @property
    def plan_id(self) -> str:
        """The plan's id (``get_plan``, ``resume_plan`` and ``cancel_plan`` take it)."""
        return self.envelope.plan_id

    @property
    def status(self) -> PlanStatus:
        """``executed``, ``failed``, ``planned`` or ``accepted``."""
        return self.envelope.status

    @property
    def steps(self) -> list[PlanStep]:
        """Every step in the plan's order, each with its status, receipt and output."""
        return self.envelope.steps

    @property
    def outputs(self) -> dict[str, Any]:
        """Each executed step's output, by step id."""
        return {s.id: s.output for s in self.envelope.steps if s.status == "executed"}

    @property
    def error(self) -> ErrorBody | None:
        """Why the plan failed: the failing step's error (``failed`` only)."""
        return self.envelope.error

    @property
    def ok(self) -> bool:
        """Whether the plan ran to its end (``executed``)."""
        return self.envelope.status == PlanStatus.EXECUTED

    @property
    def approval(self) -> ApprovalRef | None:
        """The approval an ``accepted`` plan waits for (None when it waits for nothing)."""
        return self.envelope.approval

    def step(self, step_id: str) -> PlanStep:
        """The step with this id; raises ``KeyError`` for an id the plan does not have."""
        for each in self.envelope.steps:
            if each.id == step_id:
                return each
        raise KeyError(step_id)
