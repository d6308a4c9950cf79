"""Flights: identical requests in flight on one gateway share one run.

A burst of the same request (an agent retrying on a timeout, a fan-out sending the same
call) would otherwise make every copy start the workflow (attaching to the first run) and
long-poll its result: one Temporal start and one poll per copy. Here the first copy to need
a run does it and the copies that arrive while it is going wait for its outcome in memory,
answered with the first request's answer: a replay only when that answer is one (a stored
receipt); a run the copies waited for is not a replay for any of them. Across gateways,
Temporal's workflow id (tenant + key) still gives every copy the same run.

The flight covers the first copy's whole way through Postgres (the stored-receipt lookup)
and Temporal, so the copies behind it cost no database round trip. It is keyed by who
calls (the presented key's hash) and everything that shapes the answer (idempotency key,
input hash, connection, wait budget; dry runs never share): a copy never receives an
answer it would not have got on its own. Every copy's key is verified before it joins
(``keycache``: moments ago, or by a lookup that began at most the cache's TTL ago),
never taken on trust from the first copy: a key revoked while a run is in flight is not
let into it (revoked through this gateway: at once; elsewhere: within the cache's TTL).
If the first copy fails, the others go their own way instead of sharing its error.

When the flight lands, the first copy is answered first, then every copy is handed the
outcome by a task of its own, one after another, and one that left an ``answer`` is
answered through it there, before any copy's request resumes: a copy's answer does not
wait for the copies before it to finish their way back out through the gateway's layers
(a thousand copies would otherwise queue behind each other's unwinding). A copy that gave
up waiting (cancelled) is skipped.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Hashable

from schemas.execute import EnvelopeStatus
from starter.service.executions.call import AnswerCopy, Outcome


@dataclasses.dataclass
class _Copy:
    """A copy waiting for the flight to land: ``answered`` gets its outcome (once its
    ``answer``, if it left one, is sent), None when it must go its own way (the first copy
    failed)."""

    answer: AnswerCopy | None
    trace_id: str
    on_copy: Callable[[Outcome], None] | None
    answered: asyncio.Future[Outcome | None]
    # The copy's own context (its span, its trace id in logs), for its answer.
    context: contextvars.Context = dataclasses.field(default_factory=contextvars.copy_context)


class Flights:
    """The runs this gateway is waiting on, by what makes requests identical."""

    def __init__(self) -> None:
        self._flying: dict[Hashable, list[_Copy]] = {}
        self._answering: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._flying)

    def flying(self, key: Hashable) -> bool:
        """Whether a request sharing ``key`` would join a flight under way."""
        return key in self._flying

    async def share(
        self,
        key: Hashable,
        work: Callable[[], Awaitable[Outcome]],
        trace_id: str,
        on_copy: Callable[[Outcome], None] | None = None,
        answer: AnswerCopy | None = None,
    ) -> Outcome:
        """``work()``'s outcome, done once for every copy of ``key`` that arrives meanwhile
        (``on_copy`` is told of each copy answered with the shared outcome). A copy given
        ``answer`` is answered through it when the flight lands; its outcome then says
        ``answered``."""
        loop = asyncio.get_running_loop()
        copies = self._flying.get(key)
        if copies is not None:
            copy = _Copy(answer, trace_id, on_copy, loop.create_future())
            copies.append(copy)
            shared = await copy.answered
            return shared if shared is not None else await work()
        copies = self._flying[key] = []
        outcome: Outcome | None = None
        try:
            outcome = await work()
            return outcome
        finally:
            del self._flying[key]
            for copy in copies:  # run after this request's answer is on its way
                task = loop.create_task(_answer(copy, outcome), context=copy.context)
                self._answering.add(task)
                task.add_done_callback(self._answering.discard)


def _as_copy(shared: Outcome, trace_id: str) -> Outcome:
    envelope = shared.envelope
    if envelope.status == EnvelopeStatus.ACCEPTED:  # still running: this request's trace
        envelope = envelope.model_copy(update={"trace_id": trace_id})
    return dataclasses.replace(shared, envelope=envelope)


async def _answer(copy: _Copy, shared: Outcome | None) -> None:
    if copy.answered.done():  # the copy stopped waiting
        return
    if shared is None:
        copy.answered.set_result(None)
        return
    outcome = _as_copy(shared, copy.trace_id)
    try:
        if copy.on_copy is not None:
            copy.on_copy(outcome)
        if copy.answer is not None:
            await copy.answer(outcome)
            outcome = dataclasses.replace(outcome, answered=True)
    except Exception as err:  # the copy's request raises it, as if it had answered itself
        if not copy.answered.done():
            copy.answered.set_exception(err)
        return
    if not copy.answered.done():
        copy.answered.set_result(outcome)
