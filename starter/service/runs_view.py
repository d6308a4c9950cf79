"""What the console shows of executions: pages of receipts (as ``GET /v1/receipts`` lists
them) and one execution's receipt, causal event tree, output and manifest, each read only
for a principal the API would show it to (output and manifest need ``outputs:read``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.ids import is_receipt_id
from schemas.records import Receipt
from schemas.scopes import OUTPUTS_READ, missing_scopes
from starter.service import evidence, pages
from starter.service.errors import MoatError
from starter.service.evidence import StoredManifest
from starter.service.timeline import Node, causal_tree
from store import outputs, receipts
from store.keyrings.codec import OutputSealer
from store.manifests import ManifestStore

PAGE_SIZE = 50


@dataclass(frozen=True)
class ReceiptPage:
    items: list[Receipt]
    next_cursor: str | None


async def receipt_page(
    session: AsyncSession,
    tenant_id: str,
    where: receipts.ReceiptFilter,
    cursor: str | None,
    limit: int = PAGE_SIZE,
) -> ReceiptPage:
    """The tenant's receipts matching ``where``, newest first, from ``cursor`` on."""
    after = cast("tuple[datetime, str] | None", pages.after(cursor, (datetime, str)))
    rows = await receipts.list_receipts(session, tenant_id, where, limit=limit + 1, after=after)
    return ReceiptPage(**pages.cut(rows, limit, lambda r: (r.timestamp, r.id)))


@dataclass(frozen=True)
class ExecutionView:
    """One execution as a principal may see it. ``output`` and ``manifest`` are None
    without ``outputs:read``; ``output_kept`` / ``manifest_note`` say why else."""

    receipt_id: str
    receipt: Receipt | None
    tree: list[Node]
    event_count: int
    may_read_outputs: bool
    output: Any = None
    output_kept: bool = False
    manifest: StoredManifest | None = None
    manifest_note: str = ""


def not_found(receipt_id: str) -> MoatError:
    return MoatError(ErrorCode.EXECUTION_NOT_FOUND, f"No execution {receipt_id[:80]!r}.")


async def execution_view(
    session: AsyncSession,
    sealer: OutputSealer,
    manifests: ManifestStore,
    tenant_id: str,
    receipt_id: str,
    scopes: tuple[str, ...],
) -> ExecutionView:
    """The execution ``receipt_id`` of ``tenant_id``; ``execution_not_found`` when the
    tenant has neither its receipt nor its events (another tenant's included)."""
    if not is_receipt_id(receipt_id):
        raise not_found(receipt_id)
    receipt = await receipts.get_receipt(session, tenant_id, receipt_id)
    events = await evidence.events_of(session, tenant_id, receipt_id)
    if receipt is None and not events:
        raise not_found(receipt_id)
    view = ExecutionView(
        receipt_id=receipt_id,
        receipt=receipt,
        tree=causal_tree(events),
        event_count=len(events),
        may_read_outputs=not missing_scopes(scopes, [OUTPUTS_READ]),
    )
    if not view.may_read_outputs:
        return view
    kept = await outputs.find(session, sealer, tenant_id, receipt_id, datetime.now(UTC))
    manifest, note = await _manifest(session, manifests, tenant_id, receipt_id)
    return replace(
        view,
        output=kept.output if kept is not None else None,
        output_kept=kept is not None,
        manifest=manifest,
        manifest_note=note,
    )


async def _manifest(
    session: AsyncSession, manifests: ManifestStore, tenant_id: str, receipt_id: str
) -> tuple[StoredManifest | None, str]:
    try:
        row = await evidence.indexed_manifest(session, tenant_id, receipt_id)
        return await evidence.read_manifest(manifests, row), ""
    except MoatError as err:
        return None, err.message


async def manifest_bytes(
    session: AsyncSession, manifests: ManifestStore, tenant_id: str, receipt_id: str
) -> StoredManifest:
    """The execution's original manifest, byte for byte as stored (as ``GET
    /v1/executions/{id}/manifest`` answers it)."""
    if not is_receipt_id(receipt_id):
        raise not_found(receipt_id)
    row = await evidence.indexed_manifest(session, tenant_id, receipt_id)
    return await evidence.read_manifest(manifests, row)
