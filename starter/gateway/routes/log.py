"""The tenant's transparency log: signed checkpoints (C2SP signed notes, with witnesses'
cosignatures), RFC 9162 inclusion and consistency proofs, the leaves in order, the log's
verifier key, and a witness adding its cosignature. Formats: docs/evidence.md."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from schemas.checkpoints import (
    HEX_HASH,
    ConsistencyProof,
    CosignatureIn,
    CosignatureOut,
    InclusionProof,
    LogEntry,
    ManifestProof,
)
from schemas.ids import is_receipt_id
from schemas.scopes import LOG_COSIGN, LOG_READ
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of, execution_not_found
from starter.gateway.errors import EnvelopeJSONResponse as JSONResponse
from starter.gateway.errors import documented_errors
from starter.service import translog

router = APIRouter(tags=["log"])

TEXT = "text/plain; charset=utf-8"
Size = Annotated[int, Query(ge=0, le=2**62, description="A tree size (a checkpoint's).")]


def _note(description: str) -> dict[int | str, dict[str, object]]:
    return {200: {"description": description, "content": {TEXT: {"schema": {"type": "string"}}}}}


NOTE = (
    "The checkpoint (origin `<MOAT_LOG_ORIGIN>/<tenant>`, tree size, base64 root) signed as "
    "a C2SP signed note by the log's Ed25519 key, then every witness cosignature kept for it."
)


@router.get(
    "/v1/log/checkpoint",
    summary="The latest signed checkpoint of the tenant's log",
    response_class=Response,
    responses={**_note(NOTE), **documented_errors(401, 403, 404, 500)},
    dependencies=[needs(LOG_READ)],
)
async def latest_checkpoint(session: TenantSession, caller: Caller) -> Response:
    """A new checkpoint is signed every `MOAT_LOG_CHECKPOINT_INTERVAL_SECONDS` when the log
    grew; `404 log_checkpoint_not_found` before the first."""
    note = await translog.checkpoint_note(session, caller.tenant_id)
    return Response(note, media_type=TEXT)


@router.get(
    "/v1/log/checkpoints/{size}",
    summary="The signed checkpoint of one tree size",
    response_class=Response,
    responses={**_note(NOTE), **documented_errors(401, 403, 404, 422, 500)},
    dependencies=[needs(LOG_READ)],
)
async def checkpoint_of_size(
    session: TenantSession, caller: Caller, size: Annotated[int, Path(ge=0, le=2**62)]
) -> Response:
    """Every checkpoint is kept, so a verifier can ask for consistency between any two."""
    note = await translog.checkpoint_note(session, caller.tenant_id, size)
    return Response(note, media_type=TEXT)


@router.get(
    "/v1/log/proof/inclusion",
    summary="Inclusion proof of a leaf in a tree size",
    response_model=InclusionProof,
    responses=documented_errors(401, 403, 404, 422, 500),
    dependencies=[needs(LOG_READ)],
)
async def inclusion_proof(
    session: TenantSession,
    caller: Caller,
    leaf: Annotated[
        str, Query(pattern=HEX_HASH, description="The leaf data: SHA-256 of the object, hex.")
    ],
    size: Size,
) -> InclusionProof:
    """RFC 9162 2.1.3: the path from the leaf (hashed as `SHA-256(0x00 || leaf)`) to the
    root of the tree of `size`. A size beyond the log's: `404 log_size_not_found`."""
    return await translog.inclusion(session, caller.tenant_id, leaf, size)


@router.get(
    "/v1/log/proof/consistency",
    summary="Consistency proof between two tree sizes",
    response_model=ConsistencyProof,
    responses=documented_errors(400, 401, 403, 404, 422, 500),
    dependencies=[needs(LOG_READ)],
)
async def consistency_proof(
    session: TenantSession,
    caller: Caller,
    from_size: Annotated[int, Query(alias="from", ge=0, le=2**62)],
    to_size: Annotated[int, Query(alias="to", ge=0, le=2**62)],
) -> JSONResponse:
    """RFC 9162 2.1.4: the tree of `to` leaves extends the tree of `from` leaves."""
    proof = await translog.consistency(session, caller.tenant_id, from_size, to_size)
    return JSONResponse(proof.model_dump(by_alias=True))


@router.get(
    "/v1/log/leaves",
    summary="The log's leaves in index order",
    response_model=list[LogEntry],
    responses=documented_errors(400, 401, 403, 404, 422, 500),
    dependencies=[needs(LOG_READ)],
)
async def leaves(
    session: TenantSession,
    caller: Caller,
    start: Annotated[int, Query(ge=0, le=2**62)],
    end: Annotated[int, Query(ge=0, le=2**62)],
) -> list[LogEntry]:
    """Leaves `start` to `end` - 1 (at most 1000): what each logs (`manifest` or
    `receipt`, its id) and its data."""
    return await translog.entries(session, caller.tenant_id, start, end)


@router.get(
    "/v1/log/key",
    summary="The log's verifier key",
    response_class=Response,
    responses={
        **_note("`<origin>+<key hash hex>+<base64(0x01 || Ed25519 public key)>`"),
        **documented_errors(401, 403, 500, 503),
    },
    dependencies=[needs(LOG_READ)],
)
async def log_key(request: Request, caller: Caller) -> Response:
    """The C2SP verifier key of the tenant's log, one line."""
    vkey = await translog.verifier_key(deps_of(request).settings, caller.tenant_id)
    return Response(vkey + "\n", media_type=TEXT)


@router.post(
    "/v1/log/cosignatures",
    summary="Add a witness's cosignature of a checkpoint",
    status_code=201,
    response_model=CosignatureOut,
    responses=documented_errors(400, 401, 403, 404, 422, 500),
    dependencies=[needs(LOG_COSIGN)],
)
async def add_cosignature(
    request: Request, body: CosignatureIn, session: TenantSession, caller: Caller
) -> JSONResponse:
    """Kept only if the line verifies (cosignature/v1) with `vkey` over the checkpoint of
    `size`, and `vkey` is one of `MOAT_LOG_WITNESSES` when that is set. A witness's second
    line for the same checkpoint is not kept (`added` false)."""
    settings = deps_of(request).settings
    out = await translog.add_cosignature(session, settings, caller.tenant_id, body)
    return JSONResponse(out.model_dump(mode="json"), status_code=201 if out.added else 200)


@router.get(
    "/v1/executions/{receipt_id}/manifest/proof",
    tags=["evidence"],
    summary="The manifest's leaf, inclusion proof and checkpoint",
    response_model=ManifestProof,
    responses=documented_errors(401, 403, 404, 409, 500),
    dependencies=[needs(LOG_READ)],
)
async def manifest_proof(
    session: TenantSession,
    caller: Caller,
    receipt_id: str,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
) -> ManifestProof:
    """Against the latest checkpoint; `409 log_leaf_not_checkpointed` until the manifest's
    leaf is in one."""
    if not is_receipt_id(receipt_id):
        raise execution_not_found(receipt_id)
    return await translog.manifest_proof(session, caller.tenant_id, receipt_id, run_id)
