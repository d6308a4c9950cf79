"""Answering execute requests over HTTP: an execution's ``Outcome`` as its response (its
status, its envelope's bytes, its headers), for the request itself or, from another task,
for a copy its flight answers (``service.executions.flights``).

- Status: ``errors.execution_status`` (202 while running, 200 once executed or planned,
  a failed one's failure's); a 202 says where to poll (``Location``, ``Retry-After``).
- Bytes: an envelope is encoded once (``service.executions.render``) and the bytes reused:
  an answer from memory or Postgres comes with them, and every copy sharing an outcome
  sends the first one's (an ``accepted`` copy's own, which carry its trace id).
- Headers: ``X-Moat-Idempotent-Replayed: true`` and the standard
  ``Idempotent-Replayed: true`` exactly when the envelope says ``replayed`` (a receipt
  recorded before this request, never a run attached to); ``Preference-Applied`` when
  ``Prefer: wait=N`` set the wait and a run was waited for.
- Copies: ``Boundary`` keeps each request's ``send`` (``keep_send``); a copy's answer
  goes out through it from the task that lands the flight, and the copy's request then
  returns a response that sends nothing (``_Sent``).
"""

from __future__ import annotations

import re

from fastapi import Request, Response
from starlette.types import Receive, Scope, Send

from schemas.execute import Envelope, EnvelopeStatus
from schemas.names import REPLAYED_HEADER, STANDARD_REPLAYED_HEADER
from schemas.settings import MoatSettings
from starter.gateway.errors import execution_status
from starter.runtime import links
from starter.service import AnswerCopy, Outcome, render

POLL_AFTER_SECONDS = "1"
_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait=(\d{1,9}(?:\.\d{1,6})?)(?=$|[;,\s])")
_SEND = "moat.send"


def wait_budget(prefer: str | None, settings: MoatSettings) -> tuple[float, str | None]:
    """Seconds to wait for the run, and the ``Preference-Applied`` value if ``Prefer`` set it."""
    if prefer:
        match = _PREFER_WAIT.search(prefer)
        if match:
            wait = min(float(match.group(1)), settings.max_wait_seconds)
            return wait, f"wait={wait:g}"
    return settings.wait_seconds, None


def keep_send(scope: Scope, send: Send) -> None:
    """Keep the request's ``send`` as ``Boundary`` hands it on (its span told the status,
    the trace header added), for an answer sent by another task (``copy_answer``)."""
    scope[_SEND] = send


def copy_answer(request: Request, applied: str | None) -> AnswerCopy | None:
    """How a flight answers this request as a copy, when it lands; None when the request
    has no ``send`` kept for it (it is then answered by its own task)."""
    send: Send | None = request.scope.get(_SEND)
    if send is None:
        return None

    async def answer(shared: Outcome) -> None:
        await response(shared, applied)(request.scope, request.receive, send)

    return answer


def response(outcome: Outcome, applied: str | None = None) -> Response:
    """The outcome as its answer; one a flight already sent (``copy_answer``) sends
    nothing more."""
    if outcome.answered:
        return _Sent()
    return _response(outcome.envelope, _body(outcome), _headers(outcome, applied))


class _Sent(Response):
    """The answer of a request already sent by another task (``copy_answer``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


def _headers(outcome: Outcome, applied: str | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if applied and not outcome.stored:
        headers["Preference-Applied"] = applied
    if outcome.replayed:
        headers[REPLAYED_HEADER] = headers[STANDARD_REPLAYED_HEADER] = "true"
    return headers


def _body(outcome: Outcome) -> bytes:
    """The envelope's bytes: encoded once for the outcome and every copy sharing it; a
    running execution's each time (an accepted copy has its own trace)."""
    envelope = outcome.envelope
    if envelope.status == EnvelopeStatus.ACCEPTED or not outcome.encoded:
        body = render(envelope)
        if envelope.status != EnvelopeStatus.ACCEPTED:
            outcome.encoded.append(body)
        return body
    return outcome.encoded[0]


def _response(envelope: Envelope, body: bytes, headers: dict[str, str]) -> Response:
    status = execution_status(envelope)
    if status == 202:
        headers["Location"] = links.path("v1", "executions", str(envelope.receipt_id))
        headers["Retry-After"] = POLL_AFTER_SECONDS
    return Response(body, status_code=status, headers=headers, media_type="application/json")
