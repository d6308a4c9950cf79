"""A page of the log for an export, as the application role reads it: each leaf's object
bytes and inclusion proof, and why a gone object is gone (retention recorded, or not)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas import translog
from starter.service import MoatError, log_entries
from store import tenancy, tenants
from store import translog as log_store
from store.manifests import ManifestStore


async def test_objects_proofs_and_why_an_object_is_gone(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    async with sessions.begin() as session:
        tenant = (await tenants.create_tenant(session, f"t-{uuid.uuid4().hex[:12]}")).id
        # Retention removed manifest "m-expired" and said so; "m-deleted" just vanished.
        await session.execute(
            text(
                "INSERT INTO orchestration_events (id, tenant_id, event_type, aggregate_type, "
                "aggregate_id, event_data, correlation_id, actor) VALUES (:id, :t, "
                "'MANIFEST_EXPIRED', 'MANIFEST', 'm-expired', '{}', 'rcpt', 'moat.retention')"
            ),
            {"id": uuid.uuid4().hex, "t": tenant},
        )
    kinds: tuple[tuple[log_store.LeafKind, str], ...] = (
        ("manifest", "m-expired"),
        ("manifest", "m-deleted"),
        ("receipt", "r-gone"),
    )
    async with tenancy.tenant_transaction(app_sessions, tenant) as session:
        for n, (kind, ref) in enumerate(kinds):
            digest = hashlib.sha256(b"%d" % n).digest()
            await log_store.append(session, tenant, kind, ref, digest)
        head = await log_store.sequence(session, tenant)
    assert head.size == 3

    store = ManifestStore(tmp_path)
    async with tenancy.tenant_transaction(app_sessions, tenant) as session:
        page = await log_entries.entries_page(session, store, tenant, 3, 1, 1)
        assert page.next == 2 and [e.index for e in page.entries] == [1]
        page = await log_entries.entries_page(session, store, tenant, 3, 0, 10)
        with pytest.raises(MoatError) as beyond:
            await log_entries.entries_page(session, store, tenant, 4, 0, 10)
        with pytest.raises(MoatError) as outside:
            await log_entries.entries_page(session, store, tenant, 2, 3, 10)
    assert (beyond.value.code, outside.value.code) == ("log_size_not_found", "log_size_invalid")
    assert page.next is None
    assert [(e.kind, e.id, e.object, e.missing) for e in page.entries] == [
        ("manifest", "m-expired", None, "expired by retention"),
        ("manifest", "m-deleted", None, "deleted"),
        ("receipt", "r-gone", None, "deleted"),
    ]
    for entry in page.entries:
        proof = [bytes.fromhex(p) for p in entry.proof]
        leaf = translog.leaf_hash(bytes.fromhex(entry.leaf))
        assert translog.verify_inclusion(leaf, entry.index, 3, proof, head.root)
