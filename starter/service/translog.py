"""A tenant's transparency log, as its readers and witnesses see it: signed checkpoints
with their cosignatures, inclusion and consistency proofs, the leaves in order, the log's
verifier key, and a manifest's proof against the latest checkpoint. Also the operators'
"checkpoint now" (``moat log checkpoint``), which the schedule does every interval.

Sizes are checked against the tenant's sequenced tree: a proof is asked of a tree that
exists. Every function runs in the caller's transaction, scoped to the tenant."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas import translog as formats
from schemas.checkpoints import (
    ConsistencyProof,
    CosignatureIn,
    CosignatureOut,
    InclusionProof,
    LogCheckpointReport,
    LogEntry,
    ManifestProof,
)
from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from starter.service.errors import MoatError
from starter.service.evidence import indexed_manifest
from store import translog
from store.keyrings import log as log_key

log = logging.getLogger("moat.log")

MAX_LEAVES = 1000


async def checkpoint_now(
    sessions: async_sessionmaker[AsyncSession], settings: MoatSettings, tenant_ids: list[str]
) -> LogCheckpointReport:
    """Sequence these tenants' logs and sign a checkpoint of each that grew, now."""
    key = await asyncio.to_thread(log_key.signing_key, settings)
    report = LogCheckpointReport(tenants=len(tenant_ids))
    for tenant_id in tenant_ids:
        origin = log_key.origin(settings, tenant_id)
        count, signed = await translog.checkpoint_tenant(sessions, tenant_id, origin, key)
        report.sequenced += count
        report.checkpoints += signed is not None
    return report


def _not_found(size: int | None) -> MoatError:
    what = "yet (the first is signed once something is logged)" if size is None else str(size)
    return MoatError(
        ErrorCode.LOG_CHECKPOINT_NOT_FOUND,
        f"The log has no checkpoint {what}.",
        {"size": size} if size is not None else {},
    )


async def _with_cosignatures(
    session: AsyncSession, tenant_id: str, found: translog.StoredCheckpoint
) -> str:
    lines = await translog.cosignature_lines(session, tenant_id, found.size)
    return found.note + "".join(lines)


async def checkpoint_note(session: AsyncSession, tenant_id: str, size: int | None = None) -> str:
    """The signed checkpoint note (the latest, or of ``size``) with every cosignature line
    kept for it after the log's signature."""
    if size is None:
        found = await translog.latest_checkpoint(session, tenant_id)
    else:
        found = await translog.checkpoint_at(session, tenant_id, size)
    if found is None:
        raise _not_found(size)
    return await _with_cosignatures(session, tenant_id, found)


async def _check_sizes(session: AsyncSession, tenant_id: str, *sizes: int) -> None:
    head = await translog.head(session, tenant_id)
    if any(not 0 <= size <= head.size for size in sizes):
        raise MoatError(
            ErrorCode.LOG_SIZE_NOT_FOUND,
            f"The log has {head.size} leaves: ask for tree sizes from 0 to {head.size} "
            "(a checkpoint's size).",
            {"tree_size": head.size},
        )


async def inclusion(session: AsyncSession, tenant_id: str, leaf: str, size: int) -> InclusionProof:
    """The inclusion proof of the leaf with data ``leaf`` (hex) in the tree of ``size``."""
    await _check_sizes(session, tenant_id, size)
    found = await translog.leaf_by_digest(session, tenant_id, bytes.fromhex(leaf), size)
    if found is None or found.index is None:
        raise MoatError(
            ErrorCode.LOG_LEAF_NOT_FOUND,
            f"No leaf {leaf} among the first {size} leaves of the log.",
            {"leaf": leaf, "tree_size": size},
        )
    proof = await translog.inclusion_proof(session, tenant_id, found.index, size)
    return InclusionProof(
        leaf_index=found.index, tree_size=size, leaf=leaf, proof=[p.hex() for p in proof]
    )


async def consistency(
    session: AsyncSession, tenant_id: str, old_size: int, new_size: int
) -> ConsistencyProof:
    if old_size > new_size:
        raise MoatError(
            ErrorCode.LOG_SIZE_INVALID,
            f"`from` ({old_size}) is larger than `to` ({new_size}): a log only grows.",
        )
    await _check_sizes(session, tenant_id, old_size, new_size)
    proof = await translog.consistency_proof(session, tenant_id, old_size, new_size)
    return ConsistencyProof(from_size=old_size, to_size=new_size, proof=[p.hex() for p in proof])


async def entries(session: AsyncSession, tenant_id: str, start: int, end: int) -> list[LogEntry]:
    """The leaves with indices in [start, end) (at most ``MAX_LEAVES``), in index order."""
    if end < start or end - start > MAX_LEAVES:
        raise MoatError(
            ErrorCode.LOG_SIZE_INVALID,
            f"Ask for at most {MAX_LEAVES} leaves, with `start` <= `end`.",
        )
    await _check_sizes(session, tenant_id, start, end)
    rows = await translog.leaves(session, tenant_id, start, end)
    return [
        LogEntry(index=r.index or 0, kind=r.kind, id=r.ref_id, leaf=r.digest.hex()) for r in rows
    ]


async def verifier_key(settings: MoatSettings, tenant_id: str) -> str:
    """The verifier key string of the tenant's log."""
    try:
        public = await asyncio.to_thread(log_key.public_key, settings)
    except (OSError, ValueError) as exc:
        log.error("cannot serve the log's public key: %s", exc)
        raise MoatError(
            ErrorCode.LOG_KEY_UNAVAILABLE,
            "The log's public key is not available; the operator mounts it (MOAT_LOG_KEY, "
            "MOAT_LOG_PUBLIC_KEY).",
        ) from None
    return formats.make_vkey(log_key.origin(settings, tenant_id), public)


def _invalid(message: str) -> MoatError:
    return MoatError(ErrorCode.LOG_COSIGNATURE_INVALID, message)


def _identity(verifier: formats.Verifier) -> tuple[str, bytes, bytes]:
    return verifier.name, verifier.key_hash, formats.public_key_bytes(verifier.public_key)


def _witness(settings: MoatSettings, vkey: str) -> formats.Verifier:
    try:
        verifier = formats.parse_vkey(vkey)
    except formats.NoteError as exc:
        raise _invalid(f"The witness key is not a verifier key: {exc}.") from None
    if verifier.algorithm != formats.ALG_COSIGNATURE_V1:
        raise _invalid("A witness key is a cosignature/v1 key (algorithm byte 0x04).")
    allowed = {_identity(formats.parse_vkey(v)) for v in settings.log_witnesses}
    if allowed and _identity(verifier) not in allowed:
        raise _invalid(f"{verifier.name} is not a witness this deployment accepts.")
    return verifier


async def add_cosignature(
    session: AsyncSession, settings: MoatSettings, tenant_id: str, body: CosignatureIn
) -> CosignatureOut:
    """Keep a witness's cosignature of the checkpoint of ``body.size`` once it verifies with
    the witness's key (one of ``MOAT_LOG_WITNESSES`` when that is set)."""
    verifier = _witness(settings, body.vkey)
    found = await translog.checkpoint_at(session, tenant_id, body.size)
    if found is None:
        raise _not_found(body.size)
    line = body.line if body.line.endswith("\n") else body.line + "\n"
    checkpoint_body, _ = formats.split_note(found.note)
    try:
        formats.verify_cosignature(checkpoint_body, line, verifier)
    except formats.NoteError as exc:
        raise _invalid(f"The cosignature does not verify: {exc}.") from None
    added = await translog.add_cosignature(session, tenant_id, body.size, verifier.name, line)
    return CosignatureOut(size=body.size, witness=verifier.name, added=added)


async def manifest_proof(
    session: AsyncSession, tenant_id: str, receipt_id: str, run_id: str | None
) -> ManifestProof:
    """An execution's manifest's leaf, its inclusion proof and the latest checkpoint."""
    row = await indexed_manifest(session, tenant_id, receipt_id, run_id)
    leaf = await translog.leaf_of(session, tenant_id, "manifest", row.id)
    if leaf is None:
        raise MoatError(
            ErrorCode.LOG_LEAF_NOT_FOUND,
            "This manifest was written before the log existed: it has no leaf.",
        )
    latest = await translog.latest_checkpoint(session, tenant_id)
    if leaf.index is None or latest is None or leaf.index >= latest.size:
        raise MoatError(
            ErrorCode.LOG_LEAF_NOT_CHECKPOINTED,
            "The manifest is logged but not yet in a signed checkpoint; ask again after the "
            "next checkpoint (every minute by default, or `moat log checkpoint`).",
            {"manifest_id": row.id},
        )
    proof = await translog.inclusion_proof(session, tenant_id, leaf.index, latest.size)
    return ManifestProof(
        manifest_id=row.id,
        leaf_index=leaf.index,
        tree_size=latest.size,
        leaf=leaf.digest.hex(),
        proof=[p.hex() for p in proof],
        checkpoint=await _with_cosignatures(session, tenant_id, latest),
    )
