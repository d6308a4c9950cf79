"""Plans (``POST /v1/plans``): several capability calls as one durable run.

Ingest checks the whole plan before anything starts: every step's capability, input
(references aside), connection and scopes, and every reference (to an earlier step, and
a path its capability's output has). A plan's key works as an execution's: a repeat
answers the stored plan, another plan under the key is refused, a copy of a running plan
attaches to it. Each step then runs as an execution of its own (``workflows.plan``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import rfc8785
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from schemas.approvals import ApprovalRef, ApprovalStatus, approval_id_for
from schemas.canonical import MAX_JSON_DEPTH, json_depth
from schemas.capabilities import ECHOED, CapabilityCatalog, CapabilitySpec
from schemas.errors import ErrorCode
from schemas.execute import MAX_IDEMPOTENCY_KEY_LENGTH, SUPPORTED_SCHEMA_VERSIONS, ErrorBody
from schemas.ids import uuid7
from schemas.names import (
    CANCEL_PLAN_SIGNAL,
    IDEMPOTENCY_KEY_ATTRIBUTE,
    IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
    PLAN_WORKFLOW,
    RECEIPT_ATTRIBUTE,
    TENANT_ATTRIBUTE,
)
from schemas.planrun import PlanResult, PlanWorkflowInput, Resume, plan_workflow_id
from schemas.plans import (
    MAX_PLAN_KEY_LENGTH,
    CancelRequest,
    PlanEnvelope,
    PlanRequest,
    PlanStatus,
    PlanStep,
    PlanStepAnswer,
    PlanSummary,
    Problem,
    ResumeRequest,
    StepState,
    StepStatus,
    malformed,
    placeholder,
    plan_hash,
    references,
    whole_references,
)
from schemas.scopes import capability_scopes
from schemas.settings import MoatSettings
from schemas.start import PlanClaims
from starter.service import approvals as approvals_service
from starter.service import connections as connections_service
from starter.service import json_body
from starter.service.errors import MoatError, capability_not_found, field_errors
from starter.service.executions.ingest import caller_key
from starter.service.scopes import require_scope
from store import approvals, db, outputs, plans, tenancy
from store.api_keys import AuthenticatedTenant
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from store.models import PlanRow
from workflows.fairness import tenant_priority

TENANT_ATTR = SearchAttributeKey.for_keyword(TENANT_ATTRIBUTE)
KEY_ATTR = SearchAttributeKey.for_keyword(IDEMPOTENCY_KEY_ATTRIBUTE)
RECEIPT_ATTR = SearchAttributeKey.for_keyword(RECEIPT_ATTRIBUTE)
# How often a running plan is looked at for an approval it waits for, while the gateway waits.
APPROVAL_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class PlanAnswer:
    """A plan's answer: its envelope, and whether it is a stored one (a repeat)."""

    envelope: PlanEnvelope
    replayed: bool = False


@dataclass(frozen=True)
class PreparedPlan:
    request: PlanRequest
    idempotency_key: str | None
    plan_hash: str


class Plans:
    """The plans API's rules, for the gateway (built per request from its shared parts)."""

    def __init__(
        self,
        settings: MoatSettings,
        client: Client,
        catalog: CapabilityCatalog,
        start_keys: StartKeyring,
        sessions: async_sessionmaker[AsyncSession],
        sealer: OutputSealer,
    ) -> None:
        self._settings = settings
        self._client = client
        self._catalog = catalog
        self._start_keys = start_keys
        self._sessions = sessions
        self._sealer = sealer

    def prepare(self, body: bytes, header_key: str | None) -> PreparedPlan:
        """The body as a checked plan (``plan_invalid`` with every problem found)."""
        request = _request(json_body.parse(body))
        key = caller_key(
            header_key,
            request.idempotency_key,
            longest=MAX_PLAN_KEY_LENGTH,
            whose="A plan's ",
            why=f" (its steps' keys add to it, up to {MAX_IDEMPOTENCY_KEY_LENGTH})",
        )
        problems = check(request, self._catalog)
        if problems:
            first = problems[0]
            raise MoatError(
                ErrorCode.PLAN_INVALID,
                f"Step {first.step!r} ({first.where}): {first.message}",
                {"problems": [p.model_dump(exclude_none=True) for p in problems]},
            )
        digest = _digest(request, key)
        if request.dry_run:
            return PreparedPlan(request, None, digest)
        return PreparedPlan(request, key or digest, digest)

    async def run(
        self,
        tenant: AuthenticatedTenant,
        body: bytes,
        header_key: str | None,
        wait_seconds: float,
        trace_id: str,
    ) -> PlanAnswer:
        """Run the plan the body holds, or answer the plan its key already names."""
        prepared = self.prepare(body, header_key)
        specs = self._specs(prepared.request)
        self._admit_scopes(tenant, specs)
        async with tenancy.tenant_transaction(self._sessions, tenant.tenant_id) as session:
            await self._admit_connections(session, tenant.tenant_id, prepared.request)
            if prepared.idempotency_key is not None:
                row = await plans.by_key(session, tenant.tenant_id, prepared.idempotency_key)
                if row is not None:
                    _same_plan(row, prepared)
                    if row.status != PlanStatus.ACCEPTED.value:
                        envelope = await self._envelope_of(session, row, trace_id)
                        return PlanAnswer(envelope.model_copy(update={"replayed": True}), True)
        plan_id = str(uuid7())
        run = PlanWorkflowInput(
            plan_id=plan_id,
            tenant_id=tenant.tenant_id,
            idempotency_key=prepared.idempotency_key,
            plan=prepared.request.document(),
            plan_hash=prepared.plan_hash,
            request_id=str(uuid7()),
            trace_id=trace_id,
            submitted_at=datetime.now(UTC),
            idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
            local_activities=self._settings.local_activities,
            dry_run=prepared.request.dry_run,
            scopes=list(tenant.scopes),
            api_key_id=tenant.key_id,
            specs=specs,
        )
        handle = await self._start(run, WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
        return await self._wait(handle, tenant.tenant_id, run, wait_seconds, trace_id, prepared)

    async def _start(self, run: PlanWorkflowInput, reuse: WorkflowIDReusePolicy) -> Any:
        workflow_id = plan_workflow_id(run.tenant_id, run.idempotency_key, run.plan_id)
        signed = run.model_copy(
            update={"start_signature": self._start_keys.sign(PlanClaims.of(run, workflow_id))}
        )
        steps = ", ".join(s["capability_id"] for s in run.plan["steps"])
        attributes = [
            SearchAttributePair(TENANT_ATTR, run.tenant_id),
            # A plan's run is found by its plan id as an execution's by its receipt id.
            SearchAttributePair(RECEIPT_ATTR, run.plan_id),
        ]
        if run.idempotency_key is not None:
            key = run.idempotency_key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]
            attributes.append(SearchAttributePair(KEY_ATTR, key))
        return await self._client.start_workflow(
            PLAN_WORKFLOW,
            signed,
            id=workflow_id,
            task_queue=self._settings.task_queue,
            id_reuse_policy=reuse,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            result_type=PlanResult,
            priority=tenant_priority(
                run.tenant_id, self._settings.fairness_weight_of(run.tenant_id)
            ),
            static_summary=f"plan {run.plan_id} · {steps[:300]}",
            memo={"plan_id": run.plan_id, "plan_hash": run.plan_hash},
            search_attributes=TypedSearchAttributes(attributes),
        )

    async def _wait(
        self,
        handle: WorkflowHandle[Any, PlanResult],
        tenant_id: str,
        run: PlanWorkflowInput,
        wait_seconds: float,
        trace_id: str,
        prepared: PreparedPlan | None = None,
    ) -> PlanAnswer:
        """The plan's answer within ``wait_seconds``; else ``accepted`` (with the approval
        it waits for, as soon as it asks)."""
        result = await _result_within(handle, self._sessions, tenant_id, wait_seconds)
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            row = await self._row_of(session, tenant_id, run)
            if prepared is not None and row is not None:
                _same_plan(row, prepared)
            if result is None:
                if row is None:
                    return PlanAnswer(_accepted(run, trace_id))
                return PlanAnswer(await self._envelope_of(session, row, trace_id))
        envelope = _envelope(result, trace_id, run.idempotency_key, handle.id)
        if row is not None:
            envelope.on_failure = row.on_failure  # type: ignore[assignment]
        return PlanAnswer(envelope, result.replayed)

    async def _row_of(
        self,
        session: AsyncSession,
        tenant_id: str,
        run: PlanWorkflowInput,
    ) -> PlanRow | None:
        if run.idempotency_key is not None:
            return await plans.by_key(session, tenant_id, run.idempotency_key)
        return await plans.get(session, tenant_id, run.plan_id)

    async def get(self, tenant_id: str, plan_id: str, trace_id: str) -> PlanEnvelope:
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            row = await plans.get(session, tenant_id, plan_id)
            if row is None:
                raise plan_not_found(plan_id)
            return await self._envelope_of(session, row, trace_id)

    async def _envelope_of(
        self, session: AsyncSession, row: PlanRow, trace_id: str
    ) -> PlanEnvelope:
        """The plan as stored: its steps with their kept outputs, and a pending approval."""
        steps = [StepState.model_validate(s) for s in row.steps]
        now = datetime.now(UTC)
        answers = []
        for state in steps:
            output = None
            if state.status == StepStatus.EXECUTED and state.receipt_id:
                kept = await outputs.find(
                    session, self._sealer, row.tenant_id, state.receipt_id, now
                )
                output = kept.output if kept is not None else None
            answers.append(_step_answer(state, output))
        approval = None
        if row.status == PlanStatus.ACCEPTED.value:
            found = await approvals.get(session, row.tenant_id, approval_id_for(row.id))
            if found is not None and found.status == ApprovalStatus.PENDING.value:
                approval = ApprovalRef.of(approvals.to_approval(found))
        return PlanEnvelope(
            plan_id=row.id,
            status=PlanStatus(row.status),
            steps=answers,
            trace_id=trace_id,
            idempotency_key=row.idempotency_key,
            workflow_id=row.workflow_id,
            error=ErrorBody.model_validate(row.error) if row.error else None,
            approval=approval,
            on_failure=row.on_failure,
        )

    async def resume(
        self,
        tenant: AuthenticatedTenant,
        plan_id: str,
        body: ResumeRequest,
        wait_seconds: float,
        trace_id: str,
    ) -> PlanAnswer:
        """Run a failed plan on from its first unfinished step (``effect_did_not_happen``
        stated: the failed step runs again under a new key)."""
        if not body.effect_did_not_happen:
            raise MoatError(
                ErrorCode.EFFECT_STATEMENT_REQUIRED,
                "Resuming runs the failed step again under a new key: state that its "
                "effect did not happen (`effect_did_not_happen: true`).",
            )
        async with tenancy.tenant_transaction(self._sessions, tenant.tenant_id) as session:
            row = await plans.get(session, tenant.tenant_id, plan_id)
            if row is None:
                raise plan_not_found(plan_id)
            steps = [StepState.model_validate(s) for s in row.steps]
            error = row.error or {}
            if error.get("code") in (ErrorCode.APPROVAL_REJECTED, ErrorCode.APPROVAL_EXPIRED):
                raise MoatError(
                    ErrorCode.PLAN_NOT_RESUMABLE,
                    f"Plan {plan_id} ended {error['code']}: a person did not approve it, so "
                    "it does not resume. Send it again under a new key to ask again.",
                    {"plan_id": plan_id, "status": row.status},
                )
            if row.status != PlanStatus.FAILED.value or any(
                s.status == StepStatus.COMPENSATED for s in steps
            ):
                raise MoatError(
                    ErrorCode.PLAN_NOT_RESUMABLE,
                    f"Plan {plan_id} is {row.status}"
                    + (" and was compensated" if row.status == PlanStatus.FAILED.value else "")
                    + ": only a failed plan that was not rolled back resumes.",
                    {"plan_id": plan_id, "status": row.status},
                )
            key, digest = row.idempotency_key, row.plan_hash
        original = await self._original(row.workflow_id)
        run = original.model_copy(
            update={
                "plan_id": row.id,
                "request_id": str(uuid7()),
                "trace_id": trace_id,
                "submitted_at": datetime.now(UTC),
                "scopes": list(tenant.scopes),
                "api_key_id": tenant.key_id,
                "resume": Resume(
                    by=f"key:{tenant.key_id}",
                    effect_did_not_happen=True,
                    note=body.note,
                    at=datetime.now(UTC),
                ),
                "start_signature": "",
            }
        )
        assert run.idempotency_key == key and run.plan_hash == digest
        self._admit_scopes(tenant, run.specs)
        handle = await self._start(run, WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        return await self._wait(handle, tenant.tenant_id, run, wait_seconds, trace_id)

    async def _original(self, workflow_id: str) -> PlanWorkflowInput:
        """The input the plan's run was started with (its steps' raw inputs are kept only
        in Temporal, sealed by the payload codec)."""
        handle = self._client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        [original] = await self._client.data_converter.decode(
            started.input.payloads, [PlanWorkflowInput]
        )
        assert isinstance(original, PlanWorkflowInput)
        return original

    async def cancel(
        self, tenant: AuthenticatedTenant, plan_id: str, body: CancelRequest, trace_id: str
    ) -> PlanEnvelope:
        """Stop a running plan: the step under way finishes, no later step starts."""
        async with tenancy.tenant_transaction(self._sessions, tenant.tenant_id) as session:
            row = await plans.get(session, tenant.tenant_id, plan_id)
            if row is None:
                raise plan_not_found(plan_id)
            if row.status != PlanStatus.ACCEPTED.value:
                raise _finished(row)
            workflow_id = row.workflow_id
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            await handle.signal(CANCEL_PLAN_SIGNAL, args=[f"key:{tenant.key_id}", body])
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:  # the run ended meanwhile
                raise
        return await self.get(tenant.tenant_id, plan_id, trace_id)

    def _specs(self, request: PlanRequest) -> dict[str, CapabilitySpec]:
        """Each call's capability, resolved now: the run carries them."""
        found: dict[str, CapabilitySpec] = {}
        for step in request.steps:
            for name, call in ((step.id, step), (f"{step.id}/compensate", step.compensate)):
                if call is not None:
                    spec = self._catalog.get(call.capability_id, call.capability_version)
                    assert spec is not None
                    found[name] = spec
        return found

    @staticmethod
    def _admit_scopes(tenant: AuthenticatedTenant, specs: Mapping[str, CapabilitySpec]) -> None:
        """The caller's key must cover every call of the plan (steps and undos)."""
        for spec in specs.values():
            require_scope(tenant.scopes, *capability_scopes(spec.id, spec.required_scopes))

    async def _admit_connections(
        self, session: AsyncSession, tenant_id: str, request: PlanRequest
    ) -> None:
        for call in _calls(request):
            spec = self._catalog.get(call.capability_id, call.capability_version)
            assert spec is not None
            row = await connections_service.admit(session, tenant_id, spec, call.connection_id)
            if not request.dry_run:
                connections_service.refuse_revoked(row)


def resume_request(body: bytes) -> ResumeRequest:
    """A resume's body (``schema_validation_failed`` when it is not one)."""
    try:
        return ResumeRequest.model_validate(json_body.parse(body or b"{}"))
    except ValidationError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The body does not match the schema.",
            {"errors": field_errors(err.errors())},
        ) from err


async def listed(
    session: AsyncSession, tenant_id: str, status: PlanStatus | None, limit: int, after: Any
) -> list[PlanSummary]:
    """The tenant's plans, newest first, as a list shows them."""
    rows = await plans.newest(session, tenant_id, status.value if status else None, limit, after)
    return [_summary(row) for row in rows]


def _summary(row: PlanRow) -> PlanSummary:
    counts: dict[StepStatus, int] = {}
    for step in row.steps:
        status = StepStatus(step.get("status", StepStatus.PENDING))
        counts[status] = counts.get(status, 0) + 1
    return PlanSummary(
        plan_id=row.id,
        status=PlanStatus(row.status),
        idempotency_key=row.idempotency_key,
        steps=counts,
        error_code=(row.error or {}).get("code"),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def plans_store_row(session: AsyncSession, tenant_id: str, plan_id: str) -> PlanRow:
    """The plan's row, in the caller's transaction; ``plan_not_found`` without one."""
    row = await plans.get(session, tenant_id, plan_id)
    if row is None:
        raise plan_not_found(plan_id)
    return row


def plan_not_found(plan_id: str) -> MoatError:
    return MoatError(ErrorCode.PLAN_NOT_FOUND, f"No plan {plan_id!r} in this tenant.")


def _finished(row: PlanRow) -> MoatError:
    return MoatError(
        ErrorCode.PLAN_FINISHED,
        f"Plan {row.id} has finished ({row.status}): there is nothing to cancel.",
        {"plan_id": row.id, "status": row.status},
    )


def _calls(request: PlanRequest) -> list[Any]:
    found: list[Any] = []
    for step in request.steps:
        found.append(step)
        if step.compensate is not None:
            found.append(step.compensate)
    return found


def _same_plan(row: PlanRow, prepared: PreparedPlan) -> None:
    if row.plan_hash != prepared.plan_hash:
        raise MoatError(
            ErrorCode.IDEMPOTENCY_KEY_REUSED,
            "This idempotency key was used for another plan: use a new key for a new plan.",
            {"plan_id": row.id},
        )


async def _result_within(
    handle: WorkflowHandle[Any, PlanResult],
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    wait_seconds: float,
) -> PlanResult | None:
    """The plan's result within ``wait_seconds`` (a failed plan's from its failure); None
    when it is not there, or as soon as the plan waits for a person."""
    task = asyncio.ensure_future(handle.result())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                return None
            done, _ = await asyncio.wait({task}, timeout=min(APPROVAL_POLL_SECONDS, left))
            if done:
                return _result_of(task)
            async with tenancy.tenant_transaction(sessions, tenant_id) as session:
                waiting = await approvals_service.pending_of_workflow(session, tenant_id, handle.id)
            if waiting is not None:
                return None
    finally:
        task.cancel()


def _result_of(task: asyncio.Future[Any]) -> PlanResult:
    try:
        result: PlanResult = task.result()
        return result
    except WorkflowFailureError as err:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.details:
            try:
                return PlanResult.model_validate(cause.details[0])
            except ValidationError:
                pass
        raise


def _step_answer(state: StepState, output: Any) -> PlanStepAnswer:
    return PlanStepAnswer(
        id=state.id,
        status=state.status,
        capability_id=state.capability_id,
        receipt_id=state.receipt_id,
        output=output,
        error=state.error,
        decision=state.decision,
        compensation_receipt_id=state.compensation_receipt_id,
    )


def _envelope(result: PlanResult, trace_id: str, key: str | None, workflow_id: str) -> PlanEnvelope:
    return PlanEnvelope(
        plan_id=result.plan_id,
        status=result.status,
        steps=[_step_answer(s, result.outputs.get(s.id)) for s in result.steps],
        trace_id=trace_id,
        idempotency_key=key,
        workflow_id=workflow_id,
        replayed=result.replayed,
        error=result.error,
    )


def _accepted(run: PlanWorkflowInput, trace_id: str) -> PlanEnvelope:
    """A plan no worker has taken up yet."""
    request = run.request()
    return PlanEnvelope(
        plan_id=run.plan_id,
        status=PlanStatus.ACCEPTED,
        steps=[
            PlanStepAnswer(id=s.id, status=StepStatus.PENDING, capability_id=s.capability_id)
            for s in request.steps
        ],
        trace_id=trace_id,
        idempotency_key=run.idempotency_key,
        workflow_id=plan_workflow_id(run.tenant_id, run.idempotency_key, run.plan_id),
        on_failure=request.on_failure.value,
    )


# Ingest.


def _request(raw: object) -> PlanRequest:
    try:
        request = PlanRequest.model_validate(raw)
    except ValidationError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The plan does not match the schema.",
            {"errors": field_errors(err.errors())},
        ) from err
    if request.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise MoatError(
            ErrorCode.UNSUPPORTED_SCHEMA_VERSION,
            f"schema_version {request.schema_version!r} is not supported.",
            {"supported": list(SUPPORTED_SCHEMA_VERSIONS)},
        )
    return request


def _digest(request: PlanRequest, key: str | None) -> str:
    """The plan's digest, once what the schema does not state holds: inputs nested at most
    ``MAX_JSON_DEPTH`` levels, RFC 8785 can canonicalize them, and text stored as it is
    (key, connection ids, versions) holds no NUL or lone surrogate."""
    document = request.document()
    for call in _calls(request):
        if json_depth(call.input) > MAX_JSON_DEPTH:
            raise MoatError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                f"An input is nested deeper than {MAX_JSON_DEPTH} levels.",
            )
    stored = [key, *(c.connection_id for c in _calls(request))]
    stored += [c.capability_version for c in _calls(request)]
    if any(v is not None and not db.storable(v) for v in stored):
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "Text fields may not hold NUL characters or lone surrogates.",
        )
    try:
        return plan_hash(document)
    except (rfc8785.CanonicalizationError, RecursionError, UnicodeError) as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"The plan cannot be canonicalized (RFC 8785): {err}",
        ) from err


def check(request: PlanRequest, catalog: CapabilityCatalog) -> list[Problem]:
    """Everything wrong with the plan's steps: capabilities, inputs (a field that is one
    reference is checked once it resolves), ``when`` and references."""
    problems: list[Problem] = []
    earlier: dict[str, PlanStep] = {}
    for step in request.steps:
        spec = catalog.get(step.capability_id, step.capability_version)
        if spec is None:
            raise capability_not_found(catalog, step.capability_id, step.capability_version)
        problems += _input_problems(catalog, spec, step.id, "input", step.input)
        problems += _reference_problems(catalog, step.id, "input", step.input, earlier)
        if step.when is not None and step.when.step not in earlier:
            problems.append(
                Problem(
                    step=step.id,
                    where="when",
                    message=f"`when` names {step.when.step!r}, which is not an earlier step.",
                )
            )
        if step.compensate is not None:
            undo = catalog.get(step.compensate.capability_id, step.compensate.capability_version)
            if undo is None:
                raise capability_not_found(
                    catalog, step.compensate.capability_id, step.compensate.capability_version
                )
            problems += _input_problems(
                catalog, undo, step.id, "compensate.input", step.compensate.input
            )
            problems += _reference_problems(
                catalog,
                step.id,
                "compensate.input",
                step.compensate.input,
                {**earlier, step.id: step},
            )
        earlier[step.id] = step
    return problems


def _input_problems(
    catalog: CapabilityCatalog, spec: CapabilitySpec, step: str, where: str, value: dict[str, Any]
) -> list[Problem]:
    whole = whole_references(value)
    try:
        catalog.input_model(spec).model_validate(placeholder(value))
    except ValidationError as err:
        kept = [e for e in err.errors() if tuple(e["loc"]) not in whole]
        return [
            Problem(
                step=step,
                where=where,
                message=f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}",
            )
            for e in kept
        ]
    return []


def _reference_problems(
    catalog: CapabilityCatalog,
    step: str,
    where: str,
    value: Any,
    earlier: Mapping[str, PlanStep],
) -> list[Problem]:
    problems = [
        Problem(
            step=step,
            where=where,
            reference=text,
            message="not a reference: use ${steps.<id>.output.<path>}",
        )
        for text in malformed(value)
    ]
    for text, target, path in references(value):
        named = earlier.get(target)
        if named is None:
            problems.append(
                Problem(
                    step=step,
                    where=where,
                    reference=text,
                    message=f"{target!r} is not an earlier step: a step uses only what the "
                    "steps before it answered.",
                )
            )
            continue
        spec = catalog.get(named.capability_id, named.capability_version)
        assert spec is not None
        missing = _path_refusal(catalog.output_shape(spec), named.input, path)
        if missing is not None:
            problems.append(Problem(step=step, where=where, reference=text, message=missing))
    return problems


def _path_refusal(shape: Any, step_input: Mapping[str, Any], path: Sequence[str]) -> str | None:
    """Why ``path`` is not in an output of ``shape`` (None: it may be)."""
    node: Any = dict(step_input) if shape == ECHOED else shape
    echoed = shape == ECHOED
    for depth, part in enumerate(path):
        if node is None:
            return None  # below here the output is open
        if isinstance(node, Mapping):
            if part not in node:
                so_far = ".".join(path[:depth]) or "output"
                known = ", ".join(sorted(map(str, node))) or "nothing"
                return f"the output has no {part!r} under {so_far} (it has {known})."
            node = node[part]
            if echoed and isinstance(node, str):
                return None  # an echoed value may itself be a reference, resolved later
            continue
        if isinstance(node, list) and echoed:
            if not part.isdigit() or int(part) >= len(node):
                return f"the output has no item {part!r} there."
            node = node[int(part)]
            continue
        if echoed:
            return f"the output has no {part!r} there (a {type(node).__name__})."
        return None
    return None
