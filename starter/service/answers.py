"""Stored answers of finished executions, kept in memory to answer repeats without Postgres.

A finished execution's receipt never changes, and neither does the claim on its key while
the claim is live (a key is only taken again once expired), so the first replay from
Postgres can keep what it answered: the input hash the key was claimed with (a different
input is still ``idempotency_key_reused``), and the envelope with its kept output.

Each answer is trusted until the earliest of the claim's expiry (after it the key is free
again) and the kept output's (after it Postgres answers without the output), so a repeat
from memory says exactly what Postgres would. Answers are kept by (tenant, key): the
tenant comes from the verified API key, so no tenant reaches another's. Bounded: past
``MAX_ANSWERS`` the oldest is dropped (it is answered from Postgres again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from schemas.execute import Envelope

MAX_ANSWERS = 10_000


@dataclass
class Answer:
    """What a repeat of a finished execution's key gets."""

    input_hash: str
    receipt_id: str
    capability_id: str
    envelope: Envelope
    until: datetime
    # The rendered body, filled by the first answer from memory and reused by every one.
    rendered: bytes | None = field(default=None, compare=False)


class AnswerCache:
    """Answers by (tenant, idempotency key)."""

    def __init__(self, max_answers: int = MAX_ANSWERS) -> None:
        self._max = max_answers
        self._answers: dict[tuple[str, str], Answer] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, tenant_id: str, key: str, now: datetime) -> Answer | None:
        held = self._answers.get((tenant_id, key))
        if held is None:
            return None
        if now >= held.until:
            del self._answers[(tenant_id, key)]
            return None
        return held

    def keep(self, tenant_id: str, key: str, answer: Answer) -> None:
        if self._max <= 0:
            return
        if (tenant_id, key) not in self._answers and len(self._answers) >= self._max:
            del self._answers[next(iter(self._answers))]
        self._answers[(tenant_id, key)] = answer
