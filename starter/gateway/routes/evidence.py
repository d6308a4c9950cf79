"""Evidence routes: an execution's event log, its signed manifests, and the public keys
that verify them (``/.well-known/jwks.json``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.events import Event
from schemas.ids import is_receipt_id
from schemas.names import MANIFEST_SHA256_HEADER, RUN_ID_HEADER
from schemas.scopes import OUTPUTS_READ
from starter.gateway.access import needs, public
from starter.gateway.deps import Caller, TenantSession, deps_of, execution_not_found
from starter.gateway.errors import documented_errors
from starter.service import evidence
from store.keyrings.signing import PublishedJwks
from store.manifests import ManifestStore

router = APIRouter()


@router.get(
    "/v1/executions/{receipt_id}/events",
    tags=["evidence"],
    summary="An execution's event log, in order",
    response_model=list[Event],
    responses=documented_errors(401, 404, 500),
)
async def get_events(receipt_id: str, session: TenantSession, caller: Caller) -> list[Event]:
    """Every event of the execution: type, aggregate, `causation_id` (the event
    that caused it), `sequence_number`, actor and data. Another tenant's is not found."""
    if not is_receipt_id(receipt_id):
        raise execution_not_found(receipt_id)
    events = await evidence.events_of(session, caller.tenant_id, receipt_id)
    if not events:
        raise execution_not_found(receipt_id)
    return events


@router.get(
    "/v1/executions/{receipt_id}/manifest",
    tags=["evidence"],
    summary="The signed run manifest of an execution",
    response_class=Response,
    responses={
        200: {
            "description": "The manifest file, byte for byte as stored; its detached JWS "
            "signatures verify against `/.well-known/jwks.json`.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        **documented_errors(401, 403, 404, 500),
    },
    # The manifest holds the call's (redacted) parameters and the provider's answer.
    dependencies=[needs(OUTPUTS_READ)],
)
async def get_manifest(
    request: Request,
    receipt_id: str,
    session: TenantSession,
    caller: Caller,
    run_id: Annotated[
        str | None,
        Query(
            max_length=64,
            description=(
                "A particular run's manifest (a replayed run has its own). Default: the original."
            ),
        ),
    ] = None,
) -> Response:
    """The manifest as stored (byte for byte, so its digest matches the index)."""
    if not is_receipt_id(receipt_id):
        raise execution_not_found(receipt_id)
    row = await evidence.indexed_manifest(session, caller.tenant_id, receipt_id, run_id)
    manifests = ManifestStore(deps_of(request).settings.manifests_dir)
    stored = await evidence.read_manifest(manifests, row)
    return Response(
        stored.data,
        media_type="application/json",
        headers={MANIFEST_SHA256_HEADER: stored.sha256, RUN_ID_HEADER: stored.run_id},
    )


@router.get(
    "/.well-known/jwks.json",
    tags=["evidence"],
    summary="Public keys that verify run manifests (JWK Set)",
    responses=documented_errors(500, 503),
    dependencies=[public("public keys, for anyone verifying a manifest")],
)
async def jwks(request: Request) -> dict[str, Any]:
    """Every signing key's public half, the active one first; rotated keys stay listed so
    older manifests still verify."""
    published: PublishedJwks = request.app.state.jwks
    return await evidence.public_jwks(deps_of(request).settings, published)
