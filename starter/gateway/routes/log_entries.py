"""The log's entries for an evidence export (``moat evidence export``): leaves with their
objects' bytes and inclusion proofs, a page at a time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from schemas.scopes import LOG_READ, OUTPUTS_READ
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of
from starter.gateway.errors import documented_errors
from starter.service import log_entries
from store.manifests import ManifestStore

router = APIRouter()


@router.get(
    "/v1/log/entries",
    tags=["log"],
    summary="Leaves of the tenant's log with their objects and inclusion proofs",
    response_model=log_entries.LogEntriesPage,
    responses=documented_errors(400, 401, 403, 404, 500),
    # The objects are the manifests themselves: what `outputs:read` guards elsewhere.
    dependencies=[needs(LOG_READ, OUTPUTS_READ)],
)
async def list_entries(
    request: Request,
    session: TenantSession,
    caller: Caller,
    size: Annotated[int, Query(ge=0, description="The tree size the proofs are in.")],
    start: Annotated[int | None, Query(ge=0, description="The first leaf index.")] = None,
    since: Annotated[
        datetime | None,
        Query(description="Instead of start: the first leaf recorded at or after this time."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=log_entries.MAX_PAGE)] = 200,
) -> log_entries.LogEntriesPage:
    """Leaves from `start` (or `since`) in the tree of `size` leaves, in index order: each
    with its kind, id, leaf data, its object's exact bytes (base64) or why it is gone
    (`missing`), and its inclusion proof; `next` is where the next page starts."""
    first = start or 0
    if since is not None and start is None:
        first = await log_entries.start_since(session, caller.tenant_id, since, size)
    store = ManifestStore(deps_of(request).settings.manifests_dir)
    return await log_entries.entries_page(session, store, caller.tenant_id, size, first, limit)
