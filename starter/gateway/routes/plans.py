"""Plan routes: run several capability calls as one durable run, see where it stands,
resume a failed one, cancel a running one. The rules are ``service.plans``'."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response

from schemas.events import Event
from schemas.names import (
    MANIFEST_SHA256_HEADER,
    REPLAYED_HEADER,
    RUN_ID_HEADER,
    STANDARD_REPLAYED_HEADER,
)
from schemas.plans import (
    CancelRequest,
    PlanEnvelope,
    PlanList,
    PlanStatus,
    PlanSummary,
    ResumeRequest,
)
from schemas.scopes import OUTPUTS_READ, PLANS_WRITE
from starter.gateway import answering
from starter.gateway.access import needs
from starter.gateway.deps import Caller, CallerOnly, TenantSession, deps_of, sealer_of
from starter.gateway.errors import EnvelopeJSONResponse, documented_errors, plan_status
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit
from starter.runtime import observability
from starter.service import PlanAnswer, Plans, evidence, pages
from starter.service.plans import listed, plan_not_found, plans_store_row, resume_request
from store.manifests import ManifestStore

router = APIRouter()

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="The plan's idempotency key (1 to 192 characters); each step's "
        "execution takes `<key>/<step id>`. Unset: the `idempotency_key` field, else "
        "`sha256:` of the canonical plan.",
    ),
]
PreferHeader = Annotated[
    str | None, Header(description="`wait=N`: wait up to N seconds for the plan (RFC 7240).")
]


def _plans(request: Request) -> Plans:
    deps = deps_of(request)
    return Plans(
        deps.settings,
        deps.client,
        deps.catalog,
        deps.executions.start_keys,
        deps.sessions,
        sealer_of(deps),
    )


def _answer(answer: PlanAnswer | PlanEnvelope, applied: str | None = None) -> Response:
    envelope = answer.envelope if isinstance(answer, PlanAnswer) else answer
    headers: dict[str, str] = {}
    if envelope.replayed:
        headers[REPLAYED_HEADER] = headers[STANDARD_REPLAYED_HEADER] = "true"
    if envelope.status.value == "accepted":
        headers["Location"] = f"/v1/plans/{envelope.plan_id}"
    if applied:
        headers["Preference-Applied"] = applied
    code = envelope.error.code if envelope.error is not None else None
    return EnvelopeJSONResponse(
        envelope.model_dump(mode="json"),
        status_code=plan_status(envelope.status.value, code),
        headers=headers,
    )


# The resume body as the document states it: the statement is required and must be true
# (the handler refuses anything else with ``effect_statement_required``).
RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "effect_did_not_happen": {
            "const": True,
            "description": ResumeRequest.model_fields["effect_did_not_happen"].description,
        },
        "note": {"type": "string", "maxLength": 2000},
    },
    "required": ["effect_did_not_happen"],
    "additionalProperties": False,
}


def _envelope(description: str) -> dict[str, Any]:
    return {"model": PlanEnvelope, "description": description}


@router.post(
    "/v1/plans",
    tags=["plans"],
    summary="Run several capability calls as one durable plan, once per key",
    response_model=PlanEnvelope,
    responses={
        200: _envelope(
            "`executed` (or `planned` for a dry run); a repeat of a finished "
            "plan answers it as stored, with `X-Moat-Idempotent-Replayed: true` (and the "
            "standard `Idempotent-Replayed: true`)."
        ),
        202: _envelope(
            "`accepted`: still running, or waiting for a person's approval of "
            "the whole plan (`approval`); poll `Location`."
        ),
        403: _envelope("`failed`: a step refused by policy, or the plan's approval rejected."),
        409: _envelope("`failed`: cancelled (`plan_cancelled`)."),
        502: _envelope("`failed`: a step's provider failed."),
        **documented_errors(400, 401, 404, 413, 422, 429, 500, 503),
    },
    dependencies=[
        needs(
            also="`execute:<capability_id>` (and its own scopes) of every step "
            "and every `compensate`"
        )
    ],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/PlanRequest"}}
            },
        }
    },
)
async def run_plan(
    request: Request,
    caller: CallerOnly,
    idempotency_key: IdempotencyKeyHeader = None,
    prefer: PreferHeader = None,
) -> Response:
    """Check the whole plan, then run its steps in order, each as an execution of its own
    under the key `<plan key>/<step id>`; or answer the plan the key already names. A
    step's input may use what an earlier step answered: `${steps.<id>.output.<path>}`."""
    deps = deps_of(request)
    wait, applied = answering.wait_budget(prefer, deps.settings)
    answer = await _plans(request).run(
        caller,
        await request.body(),
        idempotency_key,
        wait,
        observability.current_trace_id(),
    )
    return _answer(answer, applied)


@router.get(
    "/v1/plans",
    tags=["plans"],
    summary="The tenant's plans, newest first",
    response_model=PlanList,
    responses=documented_errors(400, 401, 500),
    dependencies=[needs(OUTPUTS_READ)],
)
async def list_plans(
    session: TenantSession,
    caller: Caller,
    status: PlanStatus | None = None,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
) -> PlanList:
    """Each plan's status, how many of its steps are in each status, and its error code;
    `GET /v1/plans/{plan_id}` has its steps."""
    after = pages.after(cursor, (datetime, str))
    rows = await listed(session, caller.tenant_id, status, limit + 1, after)
    return PlanList(**pages.cut(rows, limit, _plan_key))


def _plan_key(item: PlanSummary) -> tuple[datetime, str]:
    return (item.created_at, item.plan_id)


@router.get(
    "/v1/plans/{plan_id}",
    tags=["plans"],
    summary="Where a plan stands",
    response_model=PlanEnvelope,
    responses={
        200: _envelope("Finished: `executed`, `planned`, or `failed`."),
        202: _envelope("`accepted`: still running; poll again."),
        **documented_errors(401, 404, 500),
    },
    dependencies=[needs(OUTPUTS_READ)],
)
async def get_plan(request: Request, plan_id: str, caller: CallerOnly) -> Response:
    """The plan's steps (status, receipt, output, error) as they stand. Another tenant's
    plans are `plan_not_found`."""
    envelope = await _plans(request).get(
        caller.tenant_id, plan_id, observability.current_trace_id()
    )
    return _answer(envelope)


@router.post(
    "/v1/plans/{plan_id}/resume",
    tags=["plans"],
    summary="Run a failed plan on from its first unfinished step",
    response_model=PlanEnvelope,
    responses={
        200: _envelope("`executed` within the wait."),
        202: _envelope("`accepted`: running again; poll `Location`."),
        **documented_errors(400, 401, 403, 404, 409, 500),
    },
    dependencies=[needs(PLANS_WRITE, also="the scopes of every step")],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": RESUME_SCHEMA}},
        }
    },
)
async def resume_plan(
    request: Request,
    plan_id: str,
    caller: CallerOnly,
    prefer: PreferHeader = None,
) -> Response:
    """Completed steps are not repeated; the failed step runs again under a new key (so
    `effect_did_not_happen: true` is required, as a dead letter's requeue requires it).
    A compensated plan does not resume."""
    deps = deps_of(request)
    wait, applied = answering.wait_budget(prefer, deps.settings)
    body = resume_request(await request.body())
    answer = await _plans(request).resume(
        caller, plan_id, body, wait, observability.current_trace_id()
    )
    return _answer(answer, applied)


@router.post(
    "/v1/plans/{plan_id}/cancel",
    tags=["plans"],
    summary="Stop a running plan",
    response_model=PlanEnvelope,
    responses={
        200: _envelope("Stopped already (`failed`, `plan_cancelled`)."),
        202: _envelope("Stopping: the step under way finishes, no later step starts."),
        **documented_errors(401, 403, 404, 409, 500),
    },
    dependencies=[needs(PLANS_WRITE)],
)
async def cancel_plan(
    request: Request, plan_id: str, body: CancelRequest, caller: CallerOnly
) -> Response:
    envelope = await _plans(request).cancel(caller, plan_id, body, observability.current_trace_id())
    return _answer(envelope)


@router.get(
    "/v1/plans/{plan_id}/events",
    tags=["plans"],
    summary="A plan's event log, in order",
    response_model=list[Event],
    responses=documented_errors(401, 404, 500),
)
async def get_plan_events(plan_id: str, session: TenantSession, caller: Caller) -> list[Event]:
    """The plan's own events (`SIGNAL_*`, `RUN_*`, `RUN_CHECKPOINT_CREATED`, `STEP_SKIPPED`,
    `STEP_COMPENSATED`, `RUN_CANCELLED`); each step's are its execution's
    (`/v1/executions/{receipt_id}/events`)."""
    events = await evidence.events_of(session, caller.tenant_id, plan_id)
    if not events:
        raise plan_not_found(plan_id)
    return events


@router.get(
    "/v1/plans/{plan_id}/manifest",
    tags=["plans"],
    summary="The signed manifest of a plan's run",
    response_class=Response,
    responses={
        200: {
            "description": "The manifest file, byte for byte as stored: every step's tool call "
            "in order, what the steps created (`artifacts`), outputs per step and, for a "
            "failed plan, `partial_completion`, `rollback_required`, `rolled_back`.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        **documented_errors(401, 403, 404, 500),
    },
    dependencies=[needs(OUTPUTS_READ)],
)
async def get_plan_manifest(
    request: Request,
    plan_id: str,
    session: TenantSession,
    caller: Caller,
    run_id: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9A-Za-z-]{1,64}$",
            description="A particular run's manifest. Default: the latest.",
        ),
    ] = None,
) -> Response:
    """A resumed plan has a manifest per run; the latest is its current account."""
    if run_id is None:
        row = await plans_store_row(session, caller.tenant_id, plan_id)
        run_id = row.run_id
    indexed = await evidence.indexed_manifest(session, caller.tenant_id, plan_id, run_id)
    stored = await evidence.read_manifest(
        ManifestStore(deps_of(request).settings.manifests_dir), indexed
    )
    return Response(
        stored.data,
        media_type="application/json",
        headers={MANIFEST_SHA256_HEADER: stored.sha256, RUN_ID_HEADER: stored.run_id},
    )
