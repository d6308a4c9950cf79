"""Execution routes: execute a capability, and poll what became of an execution."""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.types import Receive, Scope, Send

from schemas.execute import Envelope, EnvelopeStatus
from schemas.ids import is_receipt_id
from schemas.names import REPLAYED_HEADER, TRACE_HEADER
from schemas.scopes import OUTPUTS_READ
from starter.gateway.access import needs
from starter.gateway.deps import (
    Deps,
    TenantKey,
    authenticate,
    deps_of,
    execution_not_found,
    unauthenticated,
)
from starter.gateway.errors import documented_errors, execution_status
from starter.gateway.middleware import answer_send
from starter.runtime import observability
from starter.service import MoatError, answers, executions
from starter.service.executions import Outcome, Unfinished
from starter.service.flights import Answer
from starter.service.keycache import UNKNOWN, KeyCache, Unknown
from store.api_keys import AuthenticatedTenant

router = APIRouter()

_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait=(\d{1,9}(?:\.\d{1,6})?)(?=$|[;,\s])")
POLL_AFTER_SECONDS = "1"

_ENVELOPE_HEADERS = {
    TRACE_HEADER: {"description": "The request's trace id.", "schema": {"type": "string"}}
}


def _envelope_response(description: str, **headers: str) -> dict[str, Any]:
    return {
        "model": Envelope,
        "description": description,
        "headers": {
            **_ENVELOPE_HEADERS,
            **{
                name: {"description": text, "schema": {"type": "string"}}
                for name, text in headers.items()
            },
        },
    }


@router.post(
    "/v1/executions",
    tags=["executions"],
    summary="Execute a capability, once per idempotency key",
    status_code=200,
    response_model=Envelope,
    responses={
        200: _envelope_response(
            "`executed` (or `planned` for a dry run). A repeat of a finished execution "
            "answers its stored receipt with `X-Moat-Idempotent-Replayed: true`.",
            **{REPLAYED_HEADER: "`true` when the stored answer of an earlier request is replayed."},
        ),
        202: _envelope_response(
            "`accepted`: still running after the wait budget, or waiting for a person's "
            "approval (`approval` names it); poll `Location`.",
            Location="Where to poll: `/v1/executions/{receipt_id}`.",
            **{"Preference-Applied": "`wait=N` when the `Prefer: wait=N` header was honoured."},
        ),
        403: _envelope_response(
            "`failed`: refused by policy (`budget_exceeded`, `scope_missing`, "
            "`policy_denied`), a refused host (`host_not_allowed`) or a revoked connection "
            "(`connection_revoked`); the receipt records it."
        ),
        502: _envelope_response(
            "`failed`: the provider failed; `error.details.provider_status` is its status."
        ),
        **documented_errors(400, 401, 404, 413, 422, 429, 500, 503),
    },
    dependencies=[needs(also="`execute:<capability_id>` and the capability's own scopes")],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ExecuteRequest"}}
            },
        }
    },
)
async def execute(
    request: Request,
    credentials: TenantKey,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="The idempotency key (1 to 256 characters). Unset: the "
            "`idempotency_key` field, else `sha256:` of the canonical request.",
        ),
    ] = None,
    prefer: Annotated[
        str | None,
        Header(description="`wait=N`: wait up to N seconds for the run (RFC 7240)."),
    ] = None,
) -> Response:
    """Validate, then run the capability, or answer the stored result of an earlier request
    with the same key. Errors are checked in this order: `payload_too_large`,
    `unauthenticated`, `bad_json`, `schema_validation_failed`, `unsupported_schema_version`,
    `idempotency_key_invalid`, `capability_not_found`, `connection_not_found`,
    `connection_type_mismatch`, `idempotency_key_reused`.

    The input is any JSON object up to 64 levels deep that RFC 8785 can canonicalize: its
    integers within ±(2^53 - 1), its text valid Unicode."""
    deps = deps_of(request)
    submitted_at = datetime.now(UTC)
    trace_id = observability.current_trace_id()
    body = await request.body()
    if credentials is None:
        raise unauthenticated("Send 'Authorization: Bearer <api key>'.")
    presented = credentials.credentials
    wait, applied = _wait_budget(prefer, deps)
    # Nothing is done with the body before the key is verified: moments ago (``deps.keys``),
    # by a lookup of it already under way here, or by this request's own lookup, which
    # opens the transaction that then looks for the stored answer (no round trip more).
    known = deps.keys.get(presented)
    if known is None:
        pending = deps.keys.pending(presented)
        found_key = await pending if pending is not None else UNKNOWN
        if found_key is None:
            raise unauthenticated("The API key is unknown or revoked.")
        if found_key is not UNKNOWN:
            known = found_key
    async with contextlib.AsyncExitStack() as held:
        session: AsyncSession | None = None
        if known is None:
            session = await held.enter_async_context(deps.sessions.begin())
            tenant = await _looked_up(deps, session, credentials)
        else:
            tenant = known
        prepared = await executions.prepare_aside(body, idempotency_key, deps.catalog)
        # A key verified moments ago lets memory answer a finished execution's stored answer.
        answer = None if session else deps.executions.remembered(tenant.tenant_id, prepared)
        if answer is not None:
            if answer.rendered is None:
                answer.rendered = _render(answer.envelope)
            return _rendered(answer.envelope, answer.rendered, {REPLAYED_HEADER: "true"})

        async def run(tenant: AuthenticatedTenant, found: Unfinished | None) -> Outcome:
            return await deps.executions.run(
                tenant.tenant_id,
                tenant.idempotency_ttl_seconds,
                prepared,
                trace_id,
                submitted_at,
                wait,
                found,
                scopes=tenant.scopes,
                api_key_id=tenant.key_id,
                policy_mode=tenant.policy_mode,
            )

        async def stored(session: AsyncSession, tenant_id: str) -> Outcome | Unfinished | None:
            await deps.executions.admit_connection(session, tenant_id, prepared)
            return await deps.executions.replay(session, tenant_id, prepared, trace_id)

        async def through_postgres() -> Outcome:
            async with deps.sessions.begin() as session:
                tenant = await authenticate(session, credentials)
                deps.rate_limits.admit(deps.settings, tenant.tenant_id)
                found = await stored(session, tenant.tenant_id)
            return found if isinstance(found, Outcome) else await run(tenant, found)

        async def in_this_transaction() -> Outcome:
            assert session is not None
            deps.rate_limits.admit(deps.settings, tenant.tenant_id)
            found = await stored(session, tenant.tenant_id)
            await held.aclose()  # the transaction ends before the run is waited for
            return found if isinstance(found, Outcome) else await run(tenant, found)

        req = prepared.request
        # Identical copies share one way through Postgres and Temporal, by the key presented;
        # each copy's key is verified before it joins (above), never taken on trust from the
        # copy that went first.
        caller = KeyCache.digest(presented)
        copy_of = (caller, prepared.idempotency_key, prepared.input_hash, req.connection_id, wait)
        flight: object = copy_of if not req.dry_run else object()
        work = through_postgres
        if session is not None:
            if deps.flights.flying(flight):
                await held.aclose()  # a copy waits for the flight without a connection
            else:
                work = in_this_transaction

        def copied(shared: Outcome) -> None:
            # A copy answered with a stored receipt is an idempotent hit like its leader.
            receipt = shared.envelope.receipt
            if shared.stored and receipt is not None:
                deps.executions.hits.note(
                    receipt.tenant_id,
                    receipt.id,
                    receipt.capability_id,
                    prepared.idempotency_key,
                    datetime.now(UTC),
                )

        send = answer_send(request.scope)
        answering = None if send is None else _answering(request, send, applied)
        outcome = await deps.flights.share(flight, work, trace_id, copied, answering)
    if outcome.answered:
        return _Sent()
    return _answer(outcome, _headers(outcome, applied))


async def _looked_up(
    deps: Deps, session: AsyncSession, credentials: HTTPAuthorizationCredentials
) -> AuthenticatedTenant:
    """The key's tenant, by this request's lookup in its transaction (scoped to the tenant
    from here on); the requests of the same key arriving meanwhile wait for it."""
    lookup = deps.keys.looking_up(credentials.credentials)
    outcome: AuthenticatedTenant | Unknown | None = UNKNOWN
    try:
        tenant = await authenticate(session, credentials)
        outcome = tenant
        return tenant
    except MoatError as err:
        if err.code == "unauthenticated":
            outcome = None
        raise
    finally:
        deps.keys.looked_up(lookup, outcome)


def _answering(request: Request, send: Send, applied: str | None) -> Answer:
    """How a flight answers this request as a copy, when it lands (``flights``)."""

    async def answer(shared: Outcome) -> None:
        await _answer(shared, _headers(shared, applied))(request.scope, request.receive, send)

    return answer


class _Sent(Response):
    """The answer of a request already sent by another task (``middleware.answer_send``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


def _headers(outcome: Outcome, applied: str | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if applied and not outcome.stored:
        headers["Preference-Applied"] = applied
    if outcome.replayed:
        headers[REPLAYED_HEADER] = "true"
    return headers


def _render(envelope: Envelope) -> bytes:
    return answers.render(envelope)  # the bytes an answer from memory sends too


def _rendered(envelope: Envelope, body: bytes, headers: dict[str, str]) -> Response:
    """An already rendered envelope, answered as ``_answer`` would."""
    status = execution_status(envelope)
    if status == 202:
        headers["Location"] = f"/v1/executions/{envelope.receipt_id}"
        headers["Retry-After"] = POLL_AFTER_SECONDS
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _answer(outcome: Outcome, headers: dict[str, str] | None = None) -> Response:
    """An execution's envelope with its status; one still running says where to poll. The
    copies sharing one outcome (``flights``) share its rendering too."""
    envelope = outcome.envelope
    if envelope.status == EnvelopeStatus.ACCEPTED or not outcome.rendered:
        body = _render(envelope)
        if envelope.status != EnvelopeStatus.ACCEPTED:  # an accepted copy has its own trace
            outcome.rendered.append(body)
    else:
        body = outcome.rendered[0]
    return _rendered(envelope, body, dict(headers or {}))


def _wait_budget(prefer: str | None, deps: Deps) -> tuple[float, str | None]:
    """Seconds to wait for the run, and the ``Preference-Applied`` value if ``Prefer`` set it."""
    if prefer:
        match = _PREFER_WAIT.search(prefer)
        if match:
            wait = min(float(match.group(1)), deps.settings.max_wait_seconds)
            return wait, f"wait={wait:g}"
    return deps.settings.wait_seconds, None


@router.get(
    "/v1/executions/{receipt_id}",
    tags=["executions"],
    summary="The current envelope of an execution",
    response_model=Envelope,
    responses={
        200: _envelope_response("Finished: `executed`, or `failed` (see the receipt)."),
        202: _envelope_response("`accepted`: still running; poll again."),
        403: _envelope_response("Finished `failed`: refused by policy or a refused host."),
        502: _envelope_response("Finished `failed`: the provider failed."),
        **documented_errors(401, 404, 500),
    },
    dependencies=[needs(OUTPUTS_READ)],
)
async def get_execution(request: Request, receipt_id: str, credentials: TenantKey) -> Response:
    """What became of the execution a `receipt_id` names, for as long as its receipt or run
    exists. Another tenant's executions are `execution_not_found`."""
    deps = deps_of(request)
    trace_id = observability.current_trace_id()
    async with deps.sessions.begin() as session:
        tenant = await authenticate(session, credentials)
        if not is_receipt_id(receipt_id):
            raise execution_not_found(receipt_id)
        envelope = await executions.recorded(
            session, deps.executions.sealer, tenant.tenant_id, receipt_id, trace_id
        )
    if envelope is None:
        envelope = await deps.executions.started(tenant.tenant_id, receipt_id, trace_id)
    if envelope is None:
        raise execution_not_found(receipt_id)
    return _answer(Outcome(envelope))
