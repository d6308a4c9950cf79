"""A page of a tenant's log for an evidence export: each leaf with the exact bytes it
logs (a manifest file as stored, a receipt's RFC 8785 form) and its inclusion proof in the
tree of a given size, or why the object is gone ("expired by retention" when retention
recorded its removal, else "deleted")."""

from __future__ import annotations

import asyncio
import base64
from datetime import datetime

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from starter.service.errors import MoatError
from store import log_objects
from store import translog as log_store
from store.manifests import ManifestStore

EXPIRED = "expired by retention"
DELETED = "deleted"
MAX_PAGE = 500


class LogEntry(BaseModel):
    index: int
    kind: str = Field(description="`manifest` or `receipt`.")
    id: str = Field(description="The manifest's or the receipt's id.")
    leaf: str = Field(description="The leaf data: SHA-256 of the object's bytes, hex.")
    object: str | None = Field(description="The object's exact bytes, base64; null if gone.")
    missing: str | None = Field(
        default=None, description="Why the object is gone: `expired by retention` or `deleted`."
    )
    proof: list[str] = Field(description="Inclusion proof of the leaf in the tree of `size`.")


class LogEntriesPage(BaseModel):
    size: int = Field(description="The tree size the proofs are in.")
    next: int | None = Field(description="The index the next page starts at; null at the end.")
    entries: list[LogEntry]


async def _objects(
    session: AsyncSession, store: ManifestStore, tenant_id: str, leaves: list[log_store.Leaf]
) -> dict[tuple[str, str], bytes | str]:
    """Each leaf's object bytes, or why it is gone, by (kind, id)."""
    manifest_ids = [leaf.ref_id for leaf in leaves if leaf.kind == "manifest"]
    receipt_ids = [leaf.ref_id for leaf in leaves if leaf.kind == "receipt"]
    rows = await log_objects.manifests(session, tenant_id, manifest_ids)
    expired = await log_objects.expired_manifests(
        session, tenant_id, [i for i in manifest_ids if i not in rows]
    )
    found: dict[tuple[str, str], bytes | str] = {}
    for ident in manifest_ids:
        row = rows.get(ident)
        if row is None:
            found["manifest", ident] = EXPIRED if ident in expired else DELETED
            continue
        try:
            found["manifest", ident] = await asyncio.to_thread(store.read, tenant_id, row.run_id)
        except FileNotFoundError:
            found["manifest", ident] = DELETED
    receipts = await log_objects.receipts(session, tenant_id, receipt_ids)
    for ident in receipt_ids:
        receipt = receipts.get(ident)
        found["receipt", ident] = log_store.receipt_bytes(receipt) if receipt else DELETED
    return found


async def start_since(session: AsyncSession, tenant_id: str, since: datetime, size: int) -> int:
    """The first leaf index recorded at or after ``since`` (``size`` when none is)."""
    first = await log_objects.first_index_since(session, tenant_id, since)
    return size if first is None else min(first, size)


async def entries_page(
    session: AsyncSession,
    store: ManifestStore,
    tenant_id: str,
    size: int,
    start: int,
    limit: int,
) -> LogEntriesPage:
    """Leaves [start, start + limit) of the tree of ``size``, objects and proofs."""
    head = await log_store.head(session, tenant_id)
    if size > head.size:
        raise MoatError(
            ErrorCode.LOG_SIZE_NOT_FOUND,
            f"The log has {head.size} leaves: ask for tree sizes from 0 to {head.size} "
            "(a checkpoint's size).",
            {"tree_size": head.size},
        )
    if not 0 <= start <= size:
        raise MoatError(
            ErrorCode.LOG_SIZE_INVALID,
            f"Leaf {start} is not in the tree of size {size}: start from 0 to {size}.",
        )
    end = min(size, start + min(limit, MAX_PAGE))
    leaves = await log_store.leaves(session, tenant_id, start, end)
    indices = [leaf.index for leaf in leaves if leaf.index is not None]
    proofs = await log_store.inclusion_proofs(session, tenant_id, indices, size)
    objects = await _objects(session, store, tenant_id, leaves)
    entries = []
    for leaf, proof in zip(leaves, proofs, strict=True):
        kept = objects[leaf.kind, leaf.ref_id]
        entries.append(
            LogEntry(
                index=leaf.index or 0,
                kind=leaf.kind,
                id=leaf.ref_id,
                leaf=leaf.digest.hex(),
                object=base64.b64encode(kept).decode() if isinstance(kept, bytes) else None,
                missing=kept if isinstance(kept, str) else None,
                proof=[p.hex() for p in proof],
            )
        )
    return LogEntriesPage(size=size, next=end if end < size else None, entries=entries)
