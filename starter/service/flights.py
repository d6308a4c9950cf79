"""Identical requests in flight on one gateway share one run.

A burst of the same request (an agent retrying on a timeout, a fan-out sending the same
call) would otherwise make every copy start the workflow (attaching to the first run) and
long-poll its result: one Temporal start and one poll per copy. Here the first copy to need
a run does it and the copies that arrive while it is going wait for its outcome in memory,
answered as replays (the first request's answer). Across gateways, Temporal's workflow id
(tenant + key) still gives every copy the same run.

The flight covers the first copy's whole way through Postgres (authentication, the
stored-receipt lookup) and Temporal, so the copies behind it cost no database round trip.
It is keyed by who calls (the tenant of a key verified moments ago, ``keycache``, else the
presented key's hash: the first copy's authentication is then theirs) and everything that
shapes the answer (idempotency key, input hash, connection, wait budget; dry runs never
share): a copy never receives an answer it would not have got on its own. If the first
copy fails, the others go their own way instead of sharing its error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Hashable

from schemas.execute import EnvelopeStatus
from starter.service.executions import Outcome


class Flights:
    """The runs this gateway is waiting on, by what makes requests identical."""

    def __init__(self) -> None:
        self._flying: dict[Hashable, asyncio.Future[Outcome | None]] = {}

    def __len__(self) -> int:
        return len(self._flying)

    async def share(
        self,
        key: Hashable,
        work: Callable[[], Awaitable[Outcome]],
        trace_id: str,
        on_copy: Callable[[Outcome], None] | None = None,
    ) -> Outcome:
        """``work()``'s outcome, done once for every copy of ``key`` that arrives meanwhile
        (``on_copy`` is told of each copy answered with the shared outcome)."""
        flying = self._flying.get(key)
        if flying is not None:
            shared = await asyncio.shield(flying)
            if shared is not None:
                if on_copy is not None:
                    on_copy(shared)
                envelope = shared.envelope
                if (
                    envelope.status == EnvelopeStatus.ACCEPTED
                ):  # still running: this request's trace
                    envelope = envelope.model_copy(update={"trace_id": trace_id})
                return dataclasses.replace(shared, envelope=envelope, replayed=True)
            return await work()
        future: asyncio.Future[Outcome | None] = asyncio.get_running_loop().create_future()
        self._flying[key] = future
        outcome: Outcome | None = None
        try:
            outcome = await work()
            return outcome
        finally:
            del self._flying[key]
            future.set_result(outcome)
