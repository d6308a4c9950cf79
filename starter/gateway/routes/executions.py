"""Execution routes: execute a capability, and poll what became of an execution. The
request's sequence is the service's (``service.executions``); its answer is
``gateway.answering``'s."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from schemas.execute import Envelope
from schemas.ids import is_receipt_id
from schemas.names import REPLAYED_HEADER, STANDARD_REPLAYED_HEADER, TRACE_HEADER
from schemas.scopes import OUTPUTS_READ
from starter.gateway import answering
from starter.gateway.access import Needs, needs
from starter.gateway.deps import (
    TenantKey,
    authenticate,
    deps_of,
    execution_not_found,
    tenant_bearer,
)
from starter.gateway.errors import documented_errors
from starter.runtime import observability
from starter.service import Call, Outcome, recorded

router = APIRouter()

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="The idempotency key (1 to 256 characters). Unset: the "
        "`idempotency_key` field, else `sha256:` of the canonical request.",
    ),
]
PreferHeader = Annotated[
    str | None,
    Header(description="`wait=N`: wait up to N seconds for the run (RFC 7240)."),
]

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


class ExecuteRoute(APIRoute):
    """``POST /v1/executions`` as declared (its documentation and parameters are
    FastAPI's), called with its parameters read straight from the request instead of by
    FastAPI's dependency solving, which costs its hottest path (a repeat answered from
    Postgres) about a tenth of its time. Nothing of it can fail: the declared dependency
    (``needs``) does nothing, the bearer key is ``tenant_bearer``'s (None when absent),
    and each header is optional text, its first value as FastAPI reads it. The handler
    is FastAPI's own when the route's parameters are not these."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        if not _read_by_hand(self.dependant):
            return super().get_route_handler()
        endpoint = self.endpoint

        async def handle(request: Request) -> Response:
            headers = request.headers
            credentials = await tenant_bearer(request)
            response: Response = await endpoint(
                request, credentials, headers.get(_KEY_HEADER), headers.get(_PREFER_HEADER)
            )
            return response

        return handle


_KEY_HEADER = "Idempotency-Key"
_PREFER_HEADER = "prefer"


def _read_by_hand(dependant: Dependant) -> bool:
    """Whether ``ExecuteRoute`` reads every parameter the route declares: the request,
    the bearer key, the two headers, and the declaration that does nothing."""
    calls = [sub.call for sub in dependant.dependencies]
    return (
        dependant.request_param_name == "request"
        and len(calls) == 2
        and isinstance(calls[0], Needs)
        and calls[1] is tenant_bearer
        and [(p.name, p.alias) for p in dependant.header_params]
        == [("idempotency_key", _KEY_HEADER), ("prefer", _PREFER_HEADER)]
        and not (
            dependant.path_params
            or dependant.query_params
            or dependant.cookie_params
            or dependant.body_params
        )
    )


async def execute(
    request: Request,
    credentials: TenantKey,
    idempotency_key: IdempotencyKeyHeader = None,
    prefer: PreferHeader = None,
) -> Response:
    """Validate, then run the capability, or answer the stored result of an earlier request
    with the same key. Errors are checked in this order: `payload_too_large`,
    `unauthenticated`, `bad_json`, `schema_validation_failed`, `unsupported_schema_version`,
    `idempotency_key_invalid`, `capability_not_found`, `connection_not_found`,
    `connection_type_mismatch`, `idempotency_key_reused`.

    The input is any JSON object up to 64 levels deep that RFC 8785 can canonicalize: its
    integers within ±(2^53 - 1), its text valid Unicode."""
    deps = deps_of(request)
    wait, applied = answering.wait_budget(prefer, deps.settings)
    call = Call(
        submitted_at=datetime.now(UTC),
        trace_id=observability.current_trace_id(),
        presented_key=credentials.credentials if credentials is not None else None,
        body=await request.body(),
        idempotency_key=idempotency_key,
        wait_seconds=wait,
        answer_copy=answering.copy_answer(request, applied),
    )
    outcome = await deps.executions.execute(call, deps)
    return answering.response(outcome, applied)


router.add_api_route(
    "/v1/executions",
    execute,
    methods=["POST"],
    route_class_override=ExecuteRoute,
    tags=["executions"],
    summary="Execute a capability, once per idempotency key",
    status_code=200,
    response_model=Envelope,
    responses={
        200: _envelope_response(
            "`executed` (or `planned` for a dry run). A repeat of a finished execution "
            "answers its stored receipt with `X-Moat-Idempotent-Replayed: true` (and the "
            "standard `Idempotent-Replayed: true`).",
            **{
                REPLAYED_HEADER: "`true` when the answer is a stored receipt recorded before "
                "this request, as the envelope's `replayed` says; absent otherwise (a request "
                "that attached to a run still going waited for it: not a replay).",
                STANDARD_REPLAYED_HEADER: "The same as `X-Moat-Idempotent-Replayed`, under the "
                "name of the IETF Idempotency-Key draft and the Agentic Commerce Protocol.",
            },
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
        envelope = await recorded(
            session, deps.executions.sealer, tenant.tenant_id, receipt_id, trace_id
        )
    if envelope is None:
        envelope = await deps.executions.started(tenant.tenant_id, receipt_id, trace_id)
    if envelope is None:
        raise execution_not_found(receipt_id)
    return answering.response(Outcome(envelope))
