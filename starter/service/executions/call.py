"""What goes through the front door (``Call``) and what comes out of it (``Outcome``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from schemas.errors import ErrorCode
from schemas.execute import Envelope
from schemas.redaction import redact
from starter.service.errors import MoatError


@dataclass(frozen=True)
class Outcome:
    """What an execute request comes to: its envelope (``accepted``, ``planned``,
    ``executed`` or ``failed``), which says whether it is a replay (``replayed``)."""

    envelope: Envelope
    # Answered from a stored receipt (an idempotent hit), not by a run.
    stored: bool = False
    # Already handed to the call's ``answer_copy`` by the flight it joined (``flights``):
    # nothing is left for the caller to answer.
    answered: bool = False
    # The envelope's JSON (``memory.render``) once encoded, opaque to the service: an answer
    # from memory or Postgres comes with it, and every copy sharing this outcome
    # (``flights``; ``dataclasses.replace`` keeps the list) sends the same bytes.
    encoded: list[bytes] = field(default_factory=list, compare=False, repr=False)

    @property
    def replayed(self) -> bool:
        """Whether the answer is a receipt recorded before this request (an idempotent
        hit). A request that attached to a run still going (another request's, or a copy
        sharing a flight) waited for that run: not a replay."""
        return self.envelope.replayed


# How a flight answers a call that joined it as a copy, from the task that lands it.
AnswerCopy = Callable[[Outcome], Awaitable[None]]


@dataclass(frozen=True)
class Call:
    """One execute request, as presented: nothing in it is verified yet."""

    # The API key presented (None: none was).
    presented_key: str | None
    body: bytes
    # The ``Idempotency-Key`` header, if sent.
    idempotency_key: str | None
    # How long the caller waits for the run before it is answered ``accepted``.
    wait_seconds: float
    trace_id: str
    submitted_at: datetime
    # Set when the caller can be answered from another task: a copy of a request in
    # flight is then answered as soon as the flight lands (``flights``).
    answer_copy: AnswerCopy | None = None


@dataclass(frozen=True)
class Unfinished:
    """The key is held by an execution with no receipt yet: its run is still going, or it
    ended before recording (terminated, timed out). ``run`` continues that execution."""

    receipt_id: str


def key_reused(key: str, receipt_id: str | None) -> MoatError:
    """The refusal of a key already taken by another input, wherever it is found."""
    return MoatError(
        ErrorCode.IDEMPOTENCY_KEY_REUSED,
        "This idempotency key was already used with a different request.",
        {"idempotency_key": redact(key), "original_receipt_id": receipt_id},
    )
