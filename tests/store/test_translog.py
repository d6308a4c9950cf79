"""The transparency log's store, as the application role under row-level security: the
sequencer builds the tree the RFC defines, in any batching and with sequencers racing;
proofs read from stored nodes verify; another tenant sees nothing."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas import translog as t
from store import tenancy, tenants, translog


async def new_tenant(sessions: async_sessionmaker[AsyncSession]) -> str:
    async with sessions.begin() as session:
        row = await tenants.create_tenant(session, f"log-{uuid.uuid4().hex[:10]}")
    return row.id


def digest(i: int) -> bytes:
    return hashlib.sha256(f"object {i}".encode()).digest()


async def append_many(app: async_sessionmaker[AsyncSession], tenant: str, start: int, end: int):
    async with tenancy.tenant_transaction(app, tenant) as session:
        for i in range(start, end):
            await translog.append(session, tenant, "receipt", f"r{i}", digest(i))


async def test_sequenced_tree_proofs_and_checkpoints(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await new_tenant(sessions)
    key = Ed25519PrivateKey.generate()
    origin = f"moat.local/log/{tenant}"
    verifier = t.parse_vkey(t.make_vkey(origin, key.public_key()))
    roots = {0: t.EMPTY_ROOT}
    hashes = [t.leaf_hash(digest(i)) for i in range(45)]
    for start, end, limit in ((0, 1, 10), (1, 7, 10), (7, 30, 5), (30, 45, 100)):
        await append_many(app_sessions, tenant, start, end)
        await append_many(app_sessions, tenant, start, start + 1)  # a retried append: no-op
        while True:
            async with tenancy.tenant_transaction(app_sessions, tenant) as session:
                before = (await translog.head(session, tenant)).size
                head = await translog.sequence(session, tenant, limit)
                if head.size == before:
                    break
                assert head.root == t.root_of(hashes[: head.size])
                roots[head.size] = head.root
                stored = await translog.sign_checkpoint(session, tenant, origin, key)
                assert stored is not None and stored.size == head.size
                assert await translog.sign_checkpoint(session, tenant, origin, key) is None
        assert head.size == end
    async with tenancy.tenant_transaction(app_sessions, tenant) as session:
        latest = await translog.latest_checkpoint(session, tenant)
        assert latest is not None and latest.size == 45
        body = t.verify_note(latest.note, verifier)
        assert t.parse_checkpoint(body) == t.Checkpoint(origin, 45, roots[45])
        for size in (1, 7, 17, 45):
            for index in {0, size // 2, size - 1}:
                found = await translog.leaf_by_digest(session, tenant, digest(index), size)
                assert found is not None and found.index == index
                proof = await translog.inclusion_proof(session, tenant, index, size)
                assert t.verify_inclusion(hashes[index], index, size, proof, roots[size])
        for old in sorted(roots):
            for new in sorted(roots):
                if old <= new:
                    proof = await translog.consistency_proof(session, tenant, old, new)
                    assert t.verify_consistency(old, new, proof, roots[old], roots[new])
        listed = await translog.leaves(session, tenant, 40, 50)
        assert [(x.index, x.ref_id, x.digest) for x in listed] == [
            (i, f"r{i}", digest(i)) for i in range(40, 45)
        ]
        assert await translog.add_cosignature(session, tenant, 45, "w1", "line 1\n")
        assert not await translog.add_cosignature(session, tenant, 45, "w1", "line 2\n")
        assert await translog.cosignature_lines(session, tenant, 45) == ["line 1\n"]
    other = await new_tenant(sessions)
    async with tenancy.tenant_transaction(app_sessions, other) as session:
        assert await translog.latest_checkpoint(session, other) is None
        assert await translog.leaves(session, other, 0, 100) == []
        assert (await translog.head(session, other)).size == 0
        assert await translog.nodes(session, tenant, [(0, 0), (5, 0)]) == {}


async def test_racing_sequencers_build_one_tree(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant = await new_tenant(sessions)

    async def sequencer() -> None:
        for _ in range(12):
            async with tenancy.tenant_transaction(app_sessions, tenant) as session:
                await translog.sequence(session, tenant, 7)

    async def writer(first: int) -> None:
        for start in range(first, first + 60, 6):
            await append_many(app_sessions, tenant, start, start + 6)

    await asyncio.gather(sequencer(), sequencer(), sequencer(), writer(0), writer(60))
    async with tenancy.tenant_transaction(app_sessions, tenant) as session:
        head = await translog.sequence(session, tenant, 1000)
        rows = (
            await session.execute(
                text(
                    "SELECT leaf_index, digest FROM log_leaves WHERE tenant_id = :t "
                    "ORDER BY leaf_index"
                ),
                {"t": tenant},
            )
        ).all()
        nodes = (
            await session.execute(
                text("SELECT count(*) FROM log_nodes WHERE tenant_id = :t"), {"t": tenant}
            )
        ).scalar_one()
    assert [row.leaf_index for row in rows] == list(range(120)) and head.size == 120
    assert head.root == t.root_of([t.leaf_hash(row.digest) for row in rows])
    assert nodes == sum(120 >> level for level in range(7))


async def test_pipelined_append_is_the_same_leaf(
    sessions: async_sessionmaker[AsyncSession], app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    from datetime import UTC, datetime

    from schemas.records import ExecutionStatus, Receipt
    from store import db

    tenant = await new_tenant(sessions)
    receipt = Receipt(
        id=str(uuid.uuid4()), capability_id="c", capability_version="1", adapter_id="a",
        tenant_id=tenant, connection_id="", request_id="q", timestamp=datetime.now(UTC),
        latency_ms=1, idempotency_key="k", input_hash="h", status=ExecutionStatus.SUCCESS,
        policy_decision_id="p", workflow_id="w", run_id="r", trace_id="t",
    )  # fmt: skip
    async with tenancy.tenant_transaction(app_sessions, tenant) as session:
        await db.pipelined(session, [translog.receipt_append(receipt)] * 2)
        await translog.append_receipt(session, receipt)
        leaf = await translog.leaf_of(session, tenant, "receipt", receipt.id)
    assert leaf is not None
    assert leaf.digest == hashlib.sha256(translog.receipt_bytes(receipt)).digest()
