"""What the client does, written once for both clients (sans I/O): each flow is a
generator that yields the next ``Call`` to make or ``Sleep`` to take and is sent back the
answer (an ``httpx.Response``, or the ``httpx.TransportError`` the call raised). The sync
and async clients only drive it.

Every retry sends the same request again, so an execution keeps its idempotency key: a
request that reached Moat before the connection dropped is answered from its receipt
instead of running twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from moat_client._config import RetryPolicy
from moat_client._results import (
    REPLAYED_HEADER,
    STANDARD_REPLAYED_HEADER,
    ExecutionResult,
    PlanResult,
)
from moat_client.codes import ErrorCode
from moat_client.errors import (
    ApprovalRequired,
    ExecutionPending,
    GatewayUnavailable,
    MoatError,
    error_for,
)
from moat_client.models import (
    Envelope,
    EnvelopeStatus,
    ErrorBody,
    ErrorEnvelope,
    PlanEnvelope,
    PlanStatus,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    json: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str | int] | None = None
    # Longer than the client's default when the gateway was asked to wait longer.
    timeout: float | None = None


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Call | Sleep
Reply = httpx.Response | httpx.TransportError | None
Flow = Generator[Step, Reply, T]

# Answers that describe an execution (as opposed to a refused request).
_EXECUTION_STATUSES = frozenset({200, 202, 403, 502})
_RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def _retry_after(response: httpx.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _is_recorded_outcome(response: httpx.Response) -> bool:
    """A gateway's 502 for a provider's failure carries its receipt (a failed plan, its
    plan id): an outcome, cached under the key, which a retry would only read again. A
    proxy's 502 carries none."""
    body = _json(response)
    return isinstance(body, dict) and bool(body.get("receipt_id") or body.get("plan_id"))


def _retryable(reply: Reply) -> bool:
    if isinstance(reply, httpx.TransportError):
        return True
    assert reply is not None
    return reply.status_code in _RETRYABLE_STATUSES and not _is_recorded_outcome(reply)


def refusal(response: httpx.Response, envelope: Envelope | None = None) -> MoatError:
    """The error for a refused request, from the gateway's error envelope."""
    body = _json(response)
    try:
        refused = ErrorEnvelope.model_validate(body)
    except ValidationError:
        text = response.text[:200]
        return MoatError(
            response.status_code, ErrorBody(code=ErrorCode.HTTP_ERROR, message=text), ""
        )
    return error_for(response.status_code, refused.error, refused.trace_id, envelope)


def exchange(call: Call, policy: RetryPolicy, key: str | None = None) -> Flow[httpx.Response]:
    """One request, retried while the answer is a network error or a retryable status,
    until the policy's deadline; the first other answer is returned as it is."""
    deadline = time.monotonic() + policy.deadline
    tries = 0
    while True:
        reply = yield call
        tries += 1
        if not _retryable(reply):
            assert isinstance(reply, httpx.Response)
            return reply
        response = reply if isinstance(reply, httpx.Response) else None
        delay = policy.backoff(tries, _retry_after(response))
        out_of_tries = policy.max_attempts is not None and tries >= policy.max_attempts
        if out_of_tries or time.monotonic() + delay > deadline:
            raise GatewayUnavailable(
                _unavailable(reply, tries, policy.deadline),
                idempotency_key=key,
                http_status=response.status_code if response is not None else 0,
            ) from (reply if isinstance(reply, httpx.TransportError) else None)
        yield Sleep(delay)


def _unavailable(reply: Reply, tries: int, deadline: float) -> str:
    if isinstance(reply, httpx.Response):
        last = f"HTTP {reply.status_code}"
    else:
        last = type(reply).__name__
    return (
        f"no answer from the gateway after {tries} tries within {deadline:g} s (last: {last}); "
        "send again with the same idempotency key"
    )


def execution_result(response: httpx.Response) -> ExecutionResult:
    """The result an execution answer describes, or the refusal raised."""
    if response.status_code not in _EXECUTION_STATUSES:
        raise refusal(response)
    try:
        envelope = Envelope.model_validate(_json(response))
    except ValidationError:
        raise refusal(response) from None
    # A dry run records no receipt; every other answer but ``accepted`` names one.
    planned = envelope.status == EnvelopeStatus.PLANNED
    if envelope.receipt_id is None and response.status_code != 202 and not planned:
        raise refusal(response)
    if response.status_code == 403:
        # Moat's policy refused it and recorded the refusal: raised, with its receipt.
        error = envelope.error or ErrorBody(
            code=ErrorCode.POLICY_DENIED, message="denied by policy"
        )
        raise error_for(403, error, envelope.trace_id, envelope)
    replayed = envelope.replayed or _replayed(response)
    return ExecutionResult(response.status_code, envelope, replayed)


def execute(
    call: Call,
    policy: RetryPolicy,
    key: str | None,
    poll: bool,
    *,
    stop_at_approval: bool = True,
) -> Flow[ExecutionResult]:
    """Execute, retrying with the same key; with ``poll``, an ``accepted`` answer is
    polled at its ``Location`` (``Retry-After`` apart) until it ends or the deadline
    passes (then ``ExecutionPending``); a run waiting for approval raises
    ``ApprovalRequired`` at once, since a person decides it, not the clock."""
    deadline = time.monotonic() + policy.deadline
    while True:
        response = yield from exchange(call, _remaining(policy, deadline), key)
        result = execution_result(response)
        if result.status != EnvelopeStatus.ACCEPTED or not poll:
            return result
        if result.approval is not None and stop_at_approval:
            raise ApprovalRequired(result.envelope)
        wait = _poll_wait(policy, response)
        if time.monotonic() + wait > deadline:
            raise ExecutionPending(
                result.envelope,
                f"the execution is still running after {policy.deadline:g} s: "
                "ask again later with its receipt_id",
            )
        yield Sleep(wait)
        call = Call("GET", _location(response, f"/v1/executions/{result.receipt_id or ''}"))


def _remaining(policy: RetryPolicy, deadline: float) -> RetryPolicy:
    """``policy`` with what is left until ``deadline`` (a monotonic time) as its deadline."""
    return RetryPolicy(
        base_delay=policy.base_delay,
        max_delay=policy.max_delay,
        deadline=max(0.0, deadline - time.monotonic()),
        max_attempts=policy.max_attempts,
        poll_interval=policy.poll_interval,
        rng=policy.rng,
    )


def _poll_wait(policy: RetryPolicy, response: httpx.Response) -> float:
    """Seconds before the next poll: the policy's, else the gateway's ``Retry-After``,
    else 1."""
    wait = policy.poll_interval
    if wait is None:
        wait = _retry_after(response)
    return 1.0 if wait is None else wait


def _location(response: httpx.Response, fallback: str) -> str:
    """Where to poll: the answer's ``Location`` when it is a path on the same gateway (the
    API key goes with every poll), else ``fallback`` (its last segment percent-encoded)."""
    location: str = response.headers.get("Location", "")
    if location.startswith("/") and not location.startswith("//"):
        return location
    head, _, last = fallback.rpartition("/")
    return f"{head}/{quote(last, safe='')}"


def plan_result(response: httpx.Response) -> PlanResult:
    """The result a plans answer describes (a failed plan's comes with its failing step's
    HTTP status), or the refusal raised."""
    body = _json(response)
    if not isinstance(body, dict) or "plan_id" not in body:
        raise refusal(response)
    try:
        envelope = PlanEnvelope.model_validate(body)
    except ValidationError:
        raise refusal(response) from None
    if response.status_code >= 400 and envelope.status != PlanStatus.FAILED:
        raise refusal(response)
    replayed = envelope.replayed or _replayed(response)
    return PlanResult(response.status_code, envelope, replayed)


def plan(call: Call, policy: RetryPolicy, key: str | None, poll: bool) -> Flow[PlanResult]:
    """A plans call, retried with the same key; with ``poll``, an ``accepted`` plan is
    polled at its ``Location`` until it ends, waits for a person's approval (a person
    decides it, not the clock), or the deadline passes: then its last answer, still
    ``accepted``."""
    deadline = time.monotonic() + policy.deadline
    while True:
        response = yield from exchange(call, _remaining(policy, deadline), key)
        result = plan_result(response)
        if result.status != PlanStatus.ACCEPTED or not poll:
            return result
        if result.approval is not None and result.approval.status == "pending":
            return result
        wait = _poll_wait(policy, response)
        if time.monotonic() + wait > deadline:
            return result
        yield Sleep(wait)
        call = Call("GET", _location(response, f"/v1/plans/{result.plan_id}"))


def read(call: Call, policy: RetryPolicy, parse: Callable[[Any], T]) -> Flow[T]:
    """A read (safe to retry): the answer parsed when it is a 200, else the refusal."""
    response = yield from exchange(call, policy)
    if response.status_code != 200:
        raise refusal(response)
    return parse(response.json())


def _replayed(response: httpx.Response) -> bool:
    """Whether the gateway said the answer is a stored one, under either header name."""
    return "true" in (
        response.headers.get(REPLAYED_HEADER),
        response.headers.get(STANDARD_REPLAYED_HEADER),
    )
