"""Memory: the stored answers of finished executions, kept to answer repeats without Postgres.

A finished execution's receipt never changes, and neither does the claim on its key while
the claim is live (a key is only taken again once expired), so the first replay from
Postgres can keep what it answered: the input hash the key was claimed with (a different
input is still ``idempotency_key_reused``), and the envelope with its kept output.

Each answer is trusted until the earliest of the claim's expiry (after it the key is free
again) and the kept output's (after it Postgres answers without the output), so a repeat
from memory says exactly what Postgres would. Answers are kept by (tenant, key): the
tenant comes from the verified API key, so no tenant reaches another's.

Bounded by bytes (``MOAT_ANSWER_CACHE_BYTES``) as well as by count (``MAX_ANSWERS``): an
answer is kept as the bytes it is sent as, never as the output's Python objects (a 1 MiB
output parsed is some 25 MB of them), beside its envelope without the output (what the
answer's status is read from), and costs its bytes plus ``ENTRY_OVERHEAD``. Past either
bound the oldest answers are dropped (they are answered from Postgres again); an answer
larger than the whole bound is not kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from schemas.execute import Envelope

MAX_ANSWERS = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# What an answer costs besides its rendered bytes: the entry, its key, and its envelope
# without the output (a receipt's worth of small Python objects): about 4.6 KB measured
# with tracemalloc for a ``demo.echo`` answer; counted with room to spare.
ENTRY_OVERHEAD = 6 * 1024


# ``json.dumps`` with these options, without making an encoder for every answer.
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def render(envelope: Envelope) -> bytes:
    """An envelope as JSON, as it is kept here and sent: compact, non-ASCII escaped (an
    echoed lone surrogate still renders)."""
    return _ENCODER.encode(envelope.model_dump(mode="json")).encode("ascii")


@dataclass
class RememberedAnswer:
    """What a repeat of a finished execution's key gets from memory."""

    input_hash: str
    receipt_id: str
    capability_id: str
    # Once kept: without its output (``rendered`` holds all of it).
    envelope: Envelope
    until: datetime
    # The rendered body: every answer from memory sends these bytes.
    rendered: bytes | None = field(default=None, compare=False)

    @property
    def cost(self) -> int:
        """What keeping it costs: its bytes and ``ENTRY_OVERHEAD``."""
        return len(self.rendered or b"") + ENTRY_OVERHEAD


class AnswerCache:
    """Answers by (tenant, idempotency key), oldest first."""

    def __init__(self, max_answers: int = MAX_ANSWERS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._max = max_answers
        self._max_bytes = max_bytes
        # Each answer with what it cost when kept.
        self._answers: dict[tuple[str, str], tuple[RememberedAnswer, int]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    @property
    def bytes(self) -> int:
        """What the answers held cost, as counted against ``max_bytes``."""
        return self._bytes

    def get(self, tenant_id: str, key: str, now: datetime) -> RememberedAnswer | None:
        held = self._answers.get((tenant_id, key))
        if held is None:
            return None
        if now >= held[0].until:
            self._drop((tenant_id, key))
            return None
        return held[0]

    def keep(self, tenant_id: str, key: str, answer: RememberedAnswer) -> None:
        if self._max <= 0:
            return
        if answer.rendered is None and answer.envelope is not None:
            answer.rendered = render(answer.envelope)
        if answer.envelope is not None and answer.envelope.output is not None:
            answer.envelope = answer.envelope.model_copy(update={"output": None})
        cost = answer.cost
        if cost > self._max_bytes:
            return
        self._drop((tenant_id, key))
        while self._answers and (
            len(self._answers) >= self._max or self._bytes + cost > self._max_bytes
        ):
            self._drop(next(iter(self._answers)))
        self._answers[(tenant_id, key)] = (answer, cost)
        self._bytes += cost

    def _drop(self, key: tuple[str, str]) -> None:
        held = self._answers.pop(key, None)
        if held is not None:
            self._bytes -= held[1]
