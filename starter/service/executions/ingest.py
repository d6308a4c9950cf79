"""Ingest: an execute request's body made into a validated request (``prepare``) before
anything looks for its answer, and its connection admitted (``admit_connection``; for a
new execution, ``admit_new`` too) before any key is claimed or run started.

Parse → validate → check ``schema_version`` → canonicalize → derive the idempotency key →
check what the schema does not state. Refusals are ``MoatError`` with the API's code.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import rfc8785
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.canonical import MAX_JSON_DEPTH, json_depth
from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.errors import ErrorCode
from schemas.execute import (
    MAX_IDEMPOTENCY_KEY_LENGTH,
    SUPPORTED_SCHEMA_VERSIONS,
    ExecuteRequest,
)
from schemas.redaction import redacted_hash
from starter.service import connections as connections_service
from starter.service import json_body
from starter.service.errors import MoatError, capability_not_found, field_errors
from store import db
from store.models import ConnectionRow

MAX_INPUT_DEPTH = MAX_JSON_DEPTH
# Bodies up to this size are prepared on the event loop (a thread's hand-off costs more
# than their parse); larger ones on a worker thread (``prepare_aside``).
INLINE_BODY_BYTES = 16 * 1024


@dataclass(frozen=True)
class Prepared:
    """A validated request, ready to run."""

    request: ExecuteRequest
    capability: CapabilitySpec
    idempotency_key: str
    input_hash: str


def prepare(body: bytes, header_key: str | None, catalog: CapabilityCatalog) -> Prepared:
    """Parse → validate → check schema_version → canonicalize → derive the key → check
    what the schema does not state (depth, storable text)."""
    try:
        prepared = _prepare(body, header_key, catalog)
    except UnicodeError as err:
        raise MoatError(
            ErrorCode.BAD_JSON,
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
    req = _request(json_body.parse(body))
    key = caller_key(header_key, req.idempotency_key)
    spec = catalog.get(req.capability_id, req.capability_version)
    if spec is None:
        raise capability_not_found(catalog, req.capability_id, req.capability_version)
    try:
        catalog.input_model(spec).model_validate(req.input)
    except ValidationError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
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
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"The input cannot be canonicalized (RFC 8785): {err}",
        ) from err
    return Prepared(
        request=req, capability=spec, idempotency_key=key or input_hash, input_hash=input_hash
    )


def _request(raw: object) -> ExecuteRequest:
    """The body as an execute request, of a supported ``schema_version``."""
    try:
        req = ExecuteRequest.model_validate(raw)
    except ValidationError as err:
        errors = err.errors()
        key_only = all(tuple(e["loc"]) == ("idempotency_key",) for e in errors)
        if key_only and isinstance(raw, dict) and isinstance(raw.get("idempotency_key"), str):
            raise MoatError(
                ErrorCode.IDEMPOTENCY_KEY_INVALID,
                f"idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters.",
                {"errors": field_errors(errors)},
            ) from err
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The request does not match the schema.",
            {"errors": field_errors(errors)},
        ) from err
    if req.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise MoatError(
            ErrorCode.UNSUPPORTED_SCHEMA_VERSION,
            f"schema_version {req.schema_version!r} is not supported.",
            {"supported": list(SUPPORTED_SCHEMA_VERSIONS)},
        )
    return req


def _check_limits(prepared: Prepared) -> None:
    """What the schema does not state: the input's depth, and text that is stored as it is
    (key, references) must be storable (no NUL, no lone surrogate). The input itself is only
    hashed, so any text is fine there."""
    req = prepared.request
    if json_depth(req.input) > MAX_INPUT_DEPTH:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
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
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "Text fields may not hold NUL characters or lone surrogates.",
            {
                "errors": [
                    {"loc": [name], "msg": "unstorable text", "type": "string_type"} for name in bad
                ]
            },
        )


def caller_key(
    header: str | None,
    field: str | None,
    *,
    longest: int = MAX_IDEMPOTENCY_KEY_LENGTH,
    whose: str = "",
    why: str = "",
) -> str | None:
    """The key the caller gave: the ``Idempotency-Key`` header (1 to ``longest``
    characters), which the body's ``idempotency_key`` must agree with, else that field."""
    if header is not None:
        if not header or len(header) > longest:
            raise MoatError(
                ErrorCode.IDEMPOTENCY_KEY_INVALID,
                f"{whose}Idempotency-Key must be 1 to {longest} characters{why}.",
            )
        if field is not None and field != header:
            raise MoatError(
                ErrorCode.IDEMPOTENCY_KEY_INVALID,
                "The Idempotency-Key header and the idempotency_key field differ.",
            )
        return header
    return field


async def admit_connection(
    session: AsyncSession, tenant_id: str, prepared: Prepared
) -> ConnectionRow | None:
    """The request's connection, as every call's (``connections_service.admit``): one the
    capability needs is named, is the tenant's, and is of a type it takes."""
    return await connections_service.admit(
        session, tenant_id, prepared.capability, prepared.request.connection_id
    )


def admit_unconnected(prepared: Prepared) -> None:
    """``admit_connection`` for a request that names no connection, with no transaction:
    its capability must do without one (``connection_required``)."""
    assert prepared.request.connection_id is None
    connections_service.admit_none(prepared.capability)


def admit_new(connection: ConnectionRow | None) -> None:
    """What a new execution's connection must be beyond ``admit_connection``, decided
    before its key is claimed or its run started: not revoked. A stored answer for the key
    is replayed whatever became of its connection since."""
    connections_service.refuse_revoked(connection)
