"""Executing a capability: parse, validate, canonicalize (``prepare``), answer idempotent
repeats from Postgres (``replay``), otherwise start (or attach to) the run and wait for it
(``run``); and what became of an execution (``recorded``, ``started``).

Persist-first: the only durable write for a new request is starting the workflow. Answers
are envelopes; refusals are ``MoatError`` with the API's code.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import rfc8785
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from schemas.approvals import Approval, ApprovalRef
from schemas.canonical import MAX_JSON_DEPTH, json_depth
from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.execute import (
    MAX_IDEMPOTENCY_KEY_LENGTH,
    SUPPORTED_SCHEMA_VERSIONS,
    Envelope,
    EnvelopeStatus,
    ExecuteRequest,
    KeptOutput,
    Plan,
    envelope_for_receipt,
)
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import (
    CAPABILITY_ATTRIBUTE,
    EXECUTE_WORKFLOW,
    IDEMPOTENCY_KEY_ATTRIBUTE,
    IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH,
    RECEIPT_ATTRIBUTE,
    TENANT_ATTRIBUTE,
)
from schemas.records import Receipt
from schemas.redaction import redact, redacted_hash
from schemas.run import (
    ExecuteResult,
    ExecuteWorkflowInput,
    PolicyOutcome,
    workflow_id_for,
)
from schemas.scopes import capability_scopes
from schemas.settings import MoatSettings
from schemas.start import START_NOT_SIGNED
from starter.runtime.availability import temporal_away
from starter.service import approvals as approvals_service
from starter.service import connections as connections_service
from starter.service import json_body
from starter.service import policy as policy_service
from starter.service.answers import Answer, AnswerCache, render
from starter.service.errors import MoatError, field_errors
from starter.service.hits import HitLedger
from starter.service.scopes import require_scope
from store import db, idempotency, outputs, receipts, tenancy
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring
from workflows.fairness import tenant_priority

TENANT_ATTR = SearchAttributeKey.for_keyword(TENANT_ATTRIBUTE)
CAPABILITY_ATTR = SearchAttributeKey.for_keyword(CAPABILITY_ATTRIBUTE)
KEY_ATTR = SearchAttributeKey.for_keyword(IDEMPOTENCY_KEY_ATTRIBUTE)
RECEIPT_ATTR = SearchAttributeKey.for_keyword(RECEIPT_ATTRIBUTE)
MAX_INPUT_DEPTH = MAX_JSON_DEPTH
# Bodies up to this size are prepared on the event loop (a thread's hand-off costs more
# than their parse); larger ones on a worker thread (``prepare_aside``).
INLINE_BODY_BYTES = 16 * 1024
# How often a run that may wait for a person is looked at while the gateway waits for it.
APPROVAL_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Prepared:
    """A validated request, ready to run."""

    request: ExecuteRequest
    capability: CapabilitySpec
    idempotency_key: str
    input_hash: str


@dataclass(frozen=True)
class Outcome:
    """What an execute request comes to: its envelope (``accepted``, ``planned``,
    ``executed`` or ``failed``), and whether it is an earlier request's answer (a stored
    receipt, or a run another request started)."""

    envelope: Envelope
    replayed: bool = False
    # Answered from a stored receipt (an idempotent hit), not by a run.
    stored: bool = False
    # Already sent to the caller by the flight this request shared (``flights``).
    answered: bool = False
    # The envelope's JSON once rendered: every copy sharing this outcome (``flights``)
    # sends the same bytes. Shared by ``dataclasses.replace`` copies.
    rendered: list[bytes] = field(default_factory=list, compare=False, repr=False)


@dataclass(frozen=True)
class Unfinished:
    """The key is held by an execution with no receipt yet: its run is still going, or it
    ended before recording (terminated, timed out). ``run`` continues that execution."""

    receipt_id: str


def prepare(body: bytes, header_key: str | None, catalog: CapabilityCatalog) -> Prepared:
    """Parse → validate → check schema_version → canonicalize → derive the key → check
    what the schema does not state (depth, storable text)."""
    try:
        prepared = _prepare(body, header_key, catalog)
    except UnicodeError as err:
        raise MoatError(
            "bad_json",
            "The body holds a lone UTF-16 surrogate; JSON text must be valid Unicode.",
        ) from err
    _check_limits(prepared)
    return prepared


async def prepare_aside(
    body: bytes, header_key: str | None, catalog: CapabilityCatalog
) -> Prepared:
    """``prepare``, on a worker thread for a body over ``INLINE_BODY_BYTES``: parsing,
    validating, canonicalizing and redacting a large body is CPU work that would otherwise
    hold the event loop, and every other request (``/healthz`` too) behind it."""
    if len(body) <= INLINE_BODY_BYTES:
        return prepare(body, header_key, catalog)
    return await asyncio.to_thread(prepare, body, header_key, catalog)


def _prepare(body: bytes, header_key: str | None, catalog: CapabilityCatalog) -> Prepared:
    raw = json_body.parse(body)
    try:
        req = ExecuteRequest.model_validate(raw)
    except ValidationError as err:
        errors = err.errors()
        key_only = all(tuple(e["loc"]) == ("idempotency_key",) for e in errors)
        if key_only and isinstance(raw, dict) and isinstance(raw.get("idempotency_key"), str):
            raise MoatError(
                "idempotency_key_invalid",
                f"idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters.",
                {"errors": field_errors(errors)},
            ) from err
        raise MoatError(
            "schema_validation_failed",
            "The request does not match the schema.",
            {"errors": field_errors(errors)},
        ) from err
    if req.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise MoatError(
            "unsupported_schema_version",
            f"schema_version {req.schema_version!r} is not supported.",
            {"supported": list(SUPPORTED_SCHEMA_VERSIONS)},
        )
    key = _caller_key(header_key, req.idempotency_key)
    spec = catalog.get(req.capability_id, req.capability_version)
    if spec is None:
        raise MoatError(
            "capability_not_found",
            f"No capability {req.capability_id!r}"
            + (f" at version {req.capability_version}" if req.capability_version else "")
            + ".",
            {"capability_id": req.capability_id},
        )
    try:
        catalog.input_model(spec).model_validate(req.input)
    except ValidationError as err:
        raise MoatError(
            "schema_validation_failed",
            f"The input does not match {spec.id}'s input schema.",
            {"errors": field_errors([{**e, "loc": ("input", *e["loc"])} for e in err.errors()])},
        ) from err
    payload = {
        "capability_id": req.capability_id,
        "capability_version": req.capability_version,
        "connection_id": req.connection_id,
        "input": req.input,
    }
    try:
        input_hash = redacted_hash(payload)
    except (rfc8785.CanonicalizationError, RecursionError) as err:
        raise MoatError(
            "schema_validation_failed", f"The input cannot be canonicalized (RFC 8785): {err}"
        ) from err
    return Prepared(
        request=req, capability=spec, idempotency_key=key or input_hash, input_hash=input_hash
    )


def _check_limits(prepared: Prepared) -> None:
    """What the schema does not state: the input's depth, and text that is stored as it is
    (key, references) must be storable (no NUL, no lone surrogate). The input itself is only
    hashed, so any text is fine there."""
    req = prepared.request
    if json_depth(req.input) > MAX_INPUT_DEPTH:
        raise MoatError(
            "schema_validation_failed",
            f"The input is nested deeper than {MAX_INPUT_DEPTH} levels.",
            {"errors": [{"loc": ["input"], "msg": "too deep", "type": "too_deep"}]},
        )
    fields = {
        "idempotency_key": prepared.idempotency_key,
        "connection_id": req.connection_id,
        "capability_version": req.capability_version,
    }
    bad = [name for name, value in fields.items() if value is not None and not db.storable(value)]
    if bad:
        raise MoatError(
            "schema_validation_failed",
            "Text fields may not hold NUL characters or lone surrogates.",
            {
                "errors": [
                    {"loc": [name], "msg": "unstorable text", "type": "string_type"} for name in bad
                ]
            },
        )


def _caller_key(header: str | None, field: str | None) -> str | None:
    if header is not None:
        if not header or len(header) > MAX_IDEMPOTENCY_KEY_LENGTH:
            raise MoatError(
                "idempotency_key_invalid",
                f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters.",
            )
        if field is not None and field != header:
            raise MoatError(
                "idempotency_key_invalid",
                "The Idempotency-Key header and the idempotency_key field differ.",
            )
        return header
    return field


class Executions:
    """Executing capabilities, for the gateway (built once, with its Temporal client)."""

    def __init__(
        self,
        settings: MoatSettings,
        client: Client,
        catalog: CapabilityCatalog,
        start_keys: StartKeyring,
        sessions: async_sessionmaker[AsyncSession],
        sealer: OutputSealer,
        hits: HitLedger | None = None,
        answers: AnswerCache | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self.catalog = catalog
        self._start_keys = start_keys
        # Signs approval decisions too (``service.approvals``).
        self.start_keys = start_keys
        self._sessions = sessions
        self.sealer = sealer
        self.hits = hits or HitLedger(sessions)
        self.answers = (
            answers if answers is not None else AnswerCache(max_bytes=settings.answer_cache_bytes)
        )

    async def admit_connection(
        self, session: AsyncSession, tenant_id: str, prepared: Prepared
    ) -> None:
        """The request's connection, as every call's (``connections_service.admit``)."""
        await connections_service.admit(
            session, tenant_id, prepared.capability, prepared.request.connection_id
        )

    async def replay(
        self, session: AsyncSession, tenant_id: str, prepared: Prepared, trace_id: str
    ) -> Outcome | Unfinished | None:
        """The stored answer for a live key, from Postgres alone (reads only: the hit is
        counted by ``hits``); otherwise go on to Temporal with the execution that holds the
        key (``Unfinished``) or a new one (None)."""
        if prepared.request.dry_run:
            return None
        now = datetime.now(UTC)
        # Claim, receipt and kept output in one statement: a replay reads once.
        found = await idempotency.find_replay(session, tenant_id, prepared.idempotency_key, now)
        if found is None:
            return None
        claim, receipt, output = found
        if claim.input_hash != prepared.input_hash:
            raise _key_reused(prepared.idempotency_key, claim.receipt_id)
        if receipt is None:
            return Unfinished(claim.receipt_id)
        # Counted in memory and added to the execution's counter in batches: no write, and
        # no Temporal call, on a replay.
        self.hits.note(tenant_id, receipt.id, receipt.capability_id, prepared.idempotency_key, now)
        kept = outputs.opened(self.sealer, output) if output is not None else None
        envelope = envelope_for_receipt(receipt, kept)
        # What Postgres answers stays true until the key or the kept output expires.
        until = min(claim.expires_at, output.expires_at) if output is not None else claim.expires_at
        # Rendered once: this answer and every one from memory send these bytes.
        rendered = render(envelope)
        self.answers.keep(
            tenant_id,
            prepared.idempotency_key,
            Answer(claim.input_hash, receipt.id, receipt.capability_id, envelope, until, rendered),
        )
        return Outcome(envelope, replayed=True, stored=True, rendered=[rendered])

    def remembered(self, tenant_id: str, prepared: Prepared) -> Answer | None:
        """A repeat of a finished execution answered from memory (``answers``), counted as
        a hit like one from Postgres; ``409`` for another input under the key. None: ask
        Postgres (not kept, expired, a dry run, or a connection to check)."""
        if prepared.request.dry_run or prepared.request.connection_id is not None:
            return None
        now = datetime.now(UTC)
        answer = self.answers.get(tenant_id, prepared.idempotency_key, now)
        if answer is None:
            return None
        if answer.input_hash != prepared.input_hash:
            raise _key_reused(prepared.idempotency_key, answer.receipt_id)
        self.hits.note(
            tenant_id, answer.receipt_id, answer.capability_id, prepared.idempotency_key, now
        )
        return answer

    async def run(
        self,
        tenant_id: str,
        ttl_seconds: int,
        prepared: Prepared,
        trace_id: str,
        submitted_at: datetime,
        wait_seconds: float,
        unfinished: Unfinished | None = None,
        *,
        scopes: Sequence[str],
        api_key_id: str = "",
        policy_mode: str | None = None,
    ) -> Outcome:
        """Start the run, or attach to the one already running for this key, and wait.

        An unfinished execution keeps its receipt id: attached to while its run goes on,
        resumed by a new run once it has ended without recording. The new run derives the
        same downstream ``Idempotency-Key``, so the provider dedupes an effect the ended run
        may already have caused. ``scopes`` are the caller's key's: the run's policy step
        checks them against the capability's.

        ``policy_mode`` (the tenant's, from before it had policy documents; None: the run
        cannot wait for a person): when the policy in force is strict, a run that waits for
        a person is answered ``accepted`` with its approval as soon as it asks, not after
        the whole wait budget. Whether it is strict is read only for a run still going after
        ``APPROVAL_POLL_SECONDS``: most are answered before."""
        receipt_id = unfinished.receipt_id if unfinished else str(uuid7())
        request_id = str(uuid7())
        req = prepared.request
        workflow_id = workflow_id_for(tenant_id, prepared.idempotency_key)
        if req.dry_run:
            # A dry run never takes the key: its own run, beside the real one's id.
            workflow_id = f"{workflow_id}/dry/{receipt_id}"
        ref = ExecutionRef(
            receipt_id=receipt_id,
            tenant_id=tenant_id,
            idempotency_key=prepared.idempotency_key,
            input_hash=prepared.input_hash,
            connection_id=req.connection_id,
        )
        arg = ExecuteWorkflowInput(
            ref=ref,
            capability=prepared.capability,
            input=req.input,
            request_id=request_id,
            trace_id=trace_id,
            submitted_at=submitted_at,
            idempotency_ttl_seconds=ttl_seconds,
            local_activities=self._settings.local_activities,
            dry_run=req.dry_run,
            scopes=list(scopes),
            api_key_id=api_key_id,
        )
        arg = self._start_keys.signed(arg, workflow_id)
        # Not after a completed run: that run recorded a receipt, which answers this request
        # (a look-up that raced the run's end, e.g. a start slowed by a Temporal restart,
        # would otherwise start a run that only replays the receipt). A run that ended
        # without recording (terminated, failed) is resumed by a new one.
        start = functools.partial(
            self._start, arg, workflow_id, prepared, receipt_id, request_id, tenant_id
        )
        try:
            handle = await start(WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY)
        except WorkflowAlreadyStartedError:
            async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
                found = await self.replay(session, tenant_id, prepared, trace_id)
            if isinstance(found, Outcome):
                return found
            # The completed run's key has expired since: a new execution takes it.
            handle = await start(WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        try:
            watch = None if policy_mode is None or req.dry_run else policy_mode
            result = await self._wait(handle, tenant_id, workflow_id, wait_seconds, watch)
        except TimeoutError:
            return await self._accepted(handle, receipt_id, request_id, prepared, trace_id)
        except WorkflowFailureError as err:
            if _refused_start(err):
                raise MoatError(
                    "gateway_error",
                    "A worker refused this gateway's signature on the run: gateways and "
                    "workers must share the same MOAT_START_KEYRING.",
                    {"workflow_id": workflow_id, "reason": START_NOT_SIGNED},
                ) from err
            raise MoatError(
                "gateway_error",
                "The run failed inside Moat; the trace id identifies it.",
                {"workflow_id": workflow_id},
            ) from err
        if result.plan is not None:
            return _planned(result.plan, prepared, trace_id)
        if result.receipt is None:
            raise MoatError(
                "gateway_error", "The run returned no receipt.", {"workflow_id": workflow_id}
            )
        # Attached to a run another request started: the answer is that request's.
        attached = result.request_id != request_id or result.receipt.id != receipt_id
        return await self._finished(
            result.receipt, result.replayed or attached, prepared, result.kept
        )

    async def _start(
        self,
        arg: ExecuteWorkflowInput,
        workflow_id: str,
        prepared: Prepared,
        receipt_id: str,
        request_id: str,
        tenant_id: str,
        reuse: WorkflowIDReusePolicy,
    ) -> Any:
        return await self._client.start_workflow(
            EXECUTE_WORKFLOW,
            arg,
            id=workflow_id,
            task_queue=self._settings.task_queue,
            id_reuse_policy=reuse,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            result_type=ExecuteResult,
            priority=tenant_priority(tenant_id, self._settings.fairness_weight_of(tenant_id)),
            # The run's line in the Web UI's list; the run keeps its details current.
            static_summary=f"{prepared.capability.id}@{prepared.capability.version} "
            f"· receipt {receipt_id}",
            memo={
                "receipt_id": receipt_id,
                "input_hash": prepared.input_hash,
                "request_id": request_id,
            },
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(TENANT_ATTR, tenant_id),
                    SearchAttributePair(CAPABILITY_ATTR, prepared.capability.id),
                    SearchAttributePair(
                        KEY_ATTR, prepared.idempotency_key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]
                    ),
                    SearchAttributePair(RECEIPT_ATTR, receipt_id),
                ]
            ),
        )

    async def _wait(
        self,
        handle: Any,
        tenant_id: str,
        workflow_id: str,
        wait_seconds: float,
        policy_mode: str | None,
    ) -> ExecuteResult:
        """The run's result within ``wait_seconds``; ``TimeoutError`` when it is not there,
        or as soon as the run waits for a person (nobody answers that in a wait budget).
        With ``policy_mode``, a run still going after each ``APPROVAL_POLL_SECONDS`` is
        looked at for an approval it waits for, once the tenant's policy is found strict."""
        task = asyncio.ensure_future(handle.result())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        strict: bool | None = None if policy_mode is not None else False
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError
                step = left if strict is False else min(APPROVAL_POLL_SECONDS, left)
                done, _ = await asyncio.wait({task}, timeout=step)
                if done:
                    return task.result()  # type: ignore[no-any-return]
                if strict is None:
                    assert policy_mode is not None
                    strict = await self._strict(tenant_id, policy_mode)
                if strict and await self._awaited_approval(tenant_id, workflow_id) is not None:
                    raise TimeoutError
        finally:
            task.cancel()

    async def _strict(self, tenant_id: str, policy_mode: str) -> bool:
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            return await policy_service.is_strict(session, tenant_id, policy_mode)

    async def _awaited_approval(self, tenant_id: str, workflow_id: str) -> Approval | None:
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            return await approvals_service.pending_of_workflow(session, tenant_id, workflow_id)

    async def restart(
        self, receipt: Receipt, new_key: str, scopes: Sequence[str], api_key_id: str
    ) -> str:
        """Start the execution of ``receipt`` again under ``new_key`` (a new workflow, so a
        new downstream ``Idempotency-Key``), from the input its run was started with, for
        the key ``api_key_id`` with ``scopes`` (who restarts it, never the original caller:
        ``scope_missing`` unless they cover the capability's); returns the new receipt id.
        Only for an effect an operator states did not happen."""
        handle = self._client.get_workflow_handle(receipt.workflow_id, run_id=receipt.run_id)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        [original] = await self._client.data_converter.decode(
            started.input.payloads, [ExecuteWorkflowInput]
        )
        assert isinstance(original, ExecuteWorkflowInput)
        cap = original.capability
        require_scope(scopes, *capability_scopes(cap.id, cap.required_scopes))
        receipt_id = str(uuid7())
        workflow_id = workflow_id_for(receipt.tenant_id, new_key)
        ref = original.ref.model_copy(update={"receipt_id": receipt_id, "idempotency_key": new_key})
        arg = original.model_copy(
            update={
                "ref": ref,
                "request_id": str(uuid7()),
                "submitted_at": datetime.now(UTC),
                "scopes": list(scopes),
                "api_key_id": api_key_id,
            }
        )
        await self._client.start_workflow(
            EXECUTE_WORKFLOW,
            self._start_keys.signed(arg, workflow_id),
            id=workflow_id,
            task_queue=self._settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            priority=tenant_priority(
                receipt.tenant_id, self._settings.fairness_weight_of(receipt.tenant_id)
            ),
            memo={"receipt_id": receipt_id, "requeue_of": receipt.id},
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(TENANT_ATTR, receipt.tenant_id),
                    SearchAttributePair(CAPABILITY_ATTR, original.capability.id),
                    SearchAttributePair(KEY_ATTR, new_key[:IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH]),
                    SearchAttributePair(RECEIPT_ATTR, receipt_id),
                ]
            ),
        )
        return receipt_id

    async def _finished(
        self, receipt: Receipt, replayed: bool, prepared: Prepared, kept: KeptOutput | None
    ) -> Outcome:
        """The envelope of a run's receipt, with ``kept``, what the run kept of the answer
        (the same ``KeptOutput`` a replay unseals from Postgres: the same bytes); when the
        run did not say (it did not record the receipt itself, or keeps nothing), read back
        from where a replay will find it."""
        if receipt.input_hash != prepared.input_hash:
            raise _key_reused(prepared.idempotency_key, receipt.id)
        if kept is None:
            async with tenancy.tenant_transaction(self._sessions, receipt.tenant_id) as session:
                kept = await outputs.find(
                    session, self.sealer, receipt.tenant_id, receipt.id, datetime.now(UTC)
                )
        return Outcome(envelope_for_receipt(receipt, kept), replayed=replayed)

    async def _accepted(
        self, handle: Any, receipt_id: str, request_id: str, prepared: Prepared, trace_id: str
    ) -> Outcome:
        try:
            memo = await (await handle.describe()).memo()
        except RPCError:
            memo = {}
        if memo.get("input_hash", prepared.input_hash) != prepared.input_hash:
            raise _key_reused(prepared.idempotency_key, memo.get("receipt_id"))
        running_id = memo.get("receipt_id", receipt_id)
        tenant_id = _tenant_of(handle.id)
        approval = await self._awaited_approval(tenant_id, handle.id) if tenant_id else None
        envelope = Envelope(
            receipt_id=running_id,
            trace_id=trace_id,
            status=EnvelopeStatus.ACCEPTED,
            idempotency_key=prepared.idempotency_key,
            workflow_id=handle.id,
            run_id=handle.result_run_id,
            approval=ApprovalRef.of(approval) if approval else None,
        )
        attached = memo.get("request_id", request_id) != request_id or running_id != receipt_id
        return Outcome(envelope, replayed=attached)

    async def started(self, tenant_id: str, receipt_id: str, trace_id: str) -> Envelope | None:
        """The ``accepted`` envelope of a run no worker has picked up yet (no claim in
        Postgres): Temporal holds it, findable by its receipt id attribute (persist-first)."""
        query = f"{TENANT_ATTRIBUTE} = '{tenant_id}' AND {RECEIPT_ATTRIBUTE} = '{receipt_id}'"
        try:
            async for wf in self._client.list_workflows(query, limit=1):
                key = wf.typed_search_attributes.get(KEY_ATTR)
                # The attribute holds the key's first characters: only a shorter key is whole.
                whole = key is not None and len(key) < IDEMPOTENCY_KEY_ATTRIBUTE_LENGTH
                return _accepted(receipt_id, trace_id, key if whole else None, wf.id)
        except RPCError as err:
            if temporal_away(err):
                raise  # 503, not a 404 that is not known to be true
            return None
        return None


async def recorded(
    session: AsyncSession, sealer: OutputSealer, tenant_id: str, receipt_id: str, trace_id: str
) -> Envelope | None:
    """An execution as Postgres knows it: finished (its receipt, and its output while kept),
    or ``accepted`` while its run, which has claimed the key, goes on. None: Postgres knows
    nothing of it yet."""
    receipt = await receipts.get_receipt(session, tenant_id, receipt_id)
    if receipt is not None:
        kept = await outputs.find(session, sealer, tenant_id, receipt_id, datetime.now(UTC))
        return envelope_for_receipt(receipt, kept)
    claim = await idempotency.find_claim_by_receipt(session, tenant_id, receipt_id)
    if claim is None:
        return None
    envelope = _accepted(receipt_id, trace_id, claim.key, claim.workflow_id)
    approval = await approvals_service.pending_for(session, tenant_id, receipt_id)
    return envelope.model_copy(update={"approval": ApprovalRef.of(approval) if approval else None})


def _accepted(receipt_id: str, trace_id: str, key: str | None, workflow_id: str) -> Envelope:
    return Envelope(
        receipt_id=receipt_id,
        trace_id=trace_id,
        status=EnvelopeStatus.ACCEPTED,
        idempotency_key=key,
        workflow_id=workflow_id,
    )


def _tenant_of(workflow_id: str) -> str | None:
    """The tenant in an execution's workflow id (``exec/<tenant>/<digest>``)."""
    parts = workflow_id.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "exec" else None


def _refused_start(err: WorkflowFailureError) -> bool:
    cause: BaseException | None = err.cause
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == START_NOT_SIGNED:
            return True
        cause = cause.__cause__
    return False


def _planned(plan: PolicyOutcome, prepared: Prepared, trace_id: str) -> Outcome:
    envelope = Envelope(
        trace_id=trace_id,
        status=EnvelopeStatus.PLANNED,
        idempotency_key=prepared.idempotency_key,
        plan=Plan(
            policy_decision_id=plan.policy_decision_id,
            decision=plan.decision.value,
            rule_hit=plan.rule_hit.value,
            mode=plan.mode.value,
            reason=plan.reason,
        ),
    )
    return Outcome(envelope)


def _key_reused(key: str, receipt_id: str | None) -> MoatError:
    return MoatError(
        "idempotency_key_reused",
        "This idempotency key was already used with a different request.",
        {"idempotency_key": redact(key), "original_receipt_id": receipt_id},
    )
