"""Evidence routes: an execution's event log, its signed manifests, and the public keys
that verify them (``/.well-known/jwks.json``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy import select

from schemas.events import Event
from schemas.names import MANIFEST_SHA256_HEADER, RUN_ID_HEADER
from starter.gateway.deps import (
    RECEIPT_ID,
    TenantKey,
    authenticate,
    deps_of,
    execution_not_found,
)
from starter.gateway.errors import ApiError, documented_errors
from store import events as event_log
from store.keys.signing import MalformedError, PublishedJwks
from store.manifests import ManifestStore
from store.models import ManifestRow

log = logging.getLogger("moat.gateway")

router = APIRouter()


@router.get(
    "/v1/executions/{receipt_id}/events",
    tags=["evidence"],
    summary="An execution's event log, in order",
    response_model=list[Event],
    responses=documented_errors(401, 404, 500),
)
async def get_events(request: Request, receipt_id: str, credentials: TenantKey) -> list[Event]:
    """Every event of the execution (seed 001): type, aggregate, `causation_id` (the event
    that caused it), `sequence_number`, actor and data. Another tenant's is not found."""
    deps = deps_of(request)
    async with deps.sessions.begin() as session:
        tenant = await authenticate(session, credentials)
        if not RECEIPT_ID.match(receipt_id):
            raise execution_not_found(receipt_id)
        events = await event_log.events_of(session, tenant.tenant_id, receipt_id)
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
        **documented_errors(401, 404, 500),
    },
)
async def get_manifest(
    request: Request,
    receipt_id: str,
    credentials: TenantKey,
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
    deps = deps_of(request)
    async with deps.sessions.begin() as session:
        tenant = await authenticate(session, credentials)
        if not RECEIPT_ID.match(receipt_id):
            raise execution_not_found(receipt_id)
        stmt = select(ManifestRow).where(
            ManifestRow.tenant_id == tenant.tenant_id, ManifestRow.receipt_id == receipt_id
        )
        if run_id is not None:
            stmt = stmt.where(ManifestRow.run_id == run_id)
        rows = (
            (await session.execute(stmt.order_by(ManifestRow.replayed, ManifestRow.created_at)))
            .scalars()
            .all()
        )
    if not rows:
        raise ApiError(404, "manifest_not_found", f"No manifest for execution {receipt_id}.")
    row = rows[0]
    store = ManifestStore(deps.settings.manifests_dir)
    try:
        data = await asyncio.to_thread(store.read, tenant.tenant_id, row.run_id)
    except FileNotFoundError:
        raise ApiError(
            404, "manifest_not_found", "The manifest file is gone (retention)."
        ) from None
    return Response(
        data,
        media_type="application/json",
        headers={MANIFEST_SHA256_HEADER: row.sha256, RUN_ID_HEADER: row.run_id},
    )


@router.get(
    "/.well-known/jwks.json",
    tags=["evidence"],
    summary="Public keys that verify run manifests (JWK Set)",
    responses=documented_errors(500, 503),
)
async def jwks(request: Request) -> dict[str, Any]:
    """Every signing key's public half, the active one first; rotated keys stay listed so
    older manifests still verify."""
    settings = deps_of(request).settings
    published: PublishedJwks = request.app.state.jwks
    try:
        return await asyncio.to_thread(published.current)
    except FileNotFoundError:
        if settings.jwks_path is None and settings.signing_keyring is None:
            return {"keys": []}  # development: no worker has made the first key yet
        log.error("no public JWKS at %s", published.path)
        raise _jwks_unavailable() from None
    except (OSError, MalformedError) as exc:
        log.error("cannot serve the public JWKS at %s: %s", published.path, exc)
        raise _jwks_unavailable() from None


def _jwks_unavailable() -> ApiError:
    return ApiError(
        503,
        "jwks_unavailable",
        "The gateway has no readable public key set; an operator publishes it with "
        "`moat keys publish` (or `moat keys rotate`) at MOAT_JWKS_PATH.",
    )
