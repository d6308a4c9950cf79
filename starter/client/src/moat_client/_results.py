"""What one execute call answers, as the client hands it to the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moat_client.models import ApprovalRef, Envelope, EnvelopeStatus, ErrorBody, Receipt

REPLAYED_HEADER = "X-Moat-Idempotent-Replayed"


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
