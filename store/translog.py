"""A tenant's transparency log in Postgres: leaves appended by the transactions that record
what they log, a sequencer that orders them into the Merkle tree, signed checkpoints,
witnesses' cosignatures and proofs. Formats: ``schemas.translog``.

- ``append`` is one INSERT, no read and no lock, so recording a receipt or a manifest never
  waits on the log; a retried transaction appends nothing twice (one leaf per object).
- ``sequence`` takes the tenant's ``log_heads`` row lock, gives the waiting leaves their
  indices in arrival order and stores every subtree they complete (``log_nodes``): each
  node is written once and never changes, so any proof reads O(log n) nodes.
- ``sign_checkpoint`` stores a signed checkpoint only when the tree grew.

Every function runs in the caller's transaction, scoped to the tenant (row-level security).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import CTE, LargeBinary, bindparam, literal, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas import translog
from schemas.canonical import canonical_bytes
from schemas.records import Receipt
from store import tenancy
from store.db import table_of
from store.models import LogLeafRow

LeafKind = Literal["manifest", "receipt"]
Node = tuple[int, int]

_LEAVES = table_of(LogLeafRow)
_APPEND = insert(_LEAVES).on_conflict_do_nothing(
    index_elements=[_LEAVES.c.tenant_id, _LEAVES.c.kind, _LEAVES.c.ref_id]
)


def receipt_bytes(receipt: Receipt) -> bytes:
    """The bytes a receipt's leaf hashes: its RFC 8785 form (the model in JSON mode)."""
    return canonical_bytes(receipt.model_dump(mode="json"))


def manifest_digest(sha256: str) -> bytes:
    """A manifest's leaf data from its index digest (``sha256:<hex>`` of the file bytes)."""
    return bytes.fromhex(sha256.removeprefix("sha256:"))


async def append(
    session: AsyncSession, tenant_id: str, kind: LeafKind, ref_id: str, digest: bytes
) -> None:
    """Add the leaf of one object (its data ``digest``, 32 bytes) to the tenant's log."""
    params = {"tenant_id": tenant_id, "kind": kind, "ref_id": ref_id, "digest": digest}
    await session.execute(_APPEND, params)


def appended_with(new: CTE, kind: LeafKind) -> CTE:
    """``append`` as a CTE of the statement that writes the object, so the object and its
    leaf are written together or not at all: the leaf of the row ``new`` inserted (the
    CTE of an INSERT returning the object's ``tenant_id`` and ``id``), none when it
    inserted nothing. The leaf's data is the statement's ``leaf_digest`` parameter."""
    rows = select(
        new.c.tenant_id, literal(kind), new.c.id, bindparam("leaf_digest", type_=LargeBinary)
    ).select_from(new)
    columns = ["tenant_id", "kind", "ref_id", "digest"]
    return (
        insert(_LEAVES)
        .from_select(columns, rows)
        .on_conflict_do_nothing(
            index_elements=[_LEAVES.c.tenant_id, _LEAVES.c.kind, _LEAVES.c.ref_id]
        )
        .cte(f"{kind}_leaf")
    )


# ``append`` as driver SQL, for a transaction that sends its statements in one round trip
# (``store.db.pipelined``).
APPEND_SQL = (
    "INSERT INTO log_leaves (tenant_id, kind, ref_id, digest) "
    "VALUES (%(tenant_id)s, %(kind)s, %(ref_id)s, %(digest)s) "
    "ON CONFLICT (tenant_id, kind, ref_id) DO NOTHING"
)


def receipt_digest(receipt: Receipt) -> bytes:
    """A receipt's leaf data: the SHA-256 of ``receipt_bytes``."""
    return hashlib.sha256(receipt_bytes(receipt)).digest()


def receipt_append(receipt: Receipt) -> tuple[str, dict[str, Any]]:
    """The receipt's ``append`` as a pipelined statement: (driver SQL, parameters)."""
    params = {"tenant_id": receipt.tenant_id, "kind": "receipt", "ref_id": receipt.id}
    return APPEND_SQL, {**params, "digest": receipt_digest(receipt)}


async def append_receipt(session: AsyncSession, receipt: Receipt) -> None:
    """``append`` the receipt as it is recorded."""
    await append(session, receipt.tenant_id, "receipt", receipt.id, receipt_digest(receipt))


# --- the sequencer ----------------------------------------------------------------------


@dataclass(frozen=True)
class Head:
    """A tenant's sequenced tree."""

    size: int
    root: bytes


_MAKE_HEAD = text(
    "INSERT INTO log_heads (tenant_id, size, root) VALUES (:t, 0, :empty) "
    "ON CONFLICT (tenant_id) DO NOTHING"
)
_SELECT_HEAD = text("SELECT size, root FROM log_heads WHERE tenant_id = :t FOR UPDATE")
_PENDING = text(
    "SELECT id, digest FROM log_leaves WHERE tenant_id = :t AND leaf_index IS NULL "
    "ORDER BY id LIMIT :n"
)
# The bounds and ``leaf_index IS NULL`` keep the scan of ``log_leaves`` to the waiting
# leaves (their partial index), whatever the size of the tree.
_NUMBER = text(
    "UPDATE log_leaves l SET leaf_index = u.i "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:idx AS bigint[])) AS u(id, i) "
    "WHERE l.tenant_id = :t AND l.leaf_index IS NULL AND l.id BETWEEN :lo AND :hi "
    "AND l.id = u.id"
)
_INSERT_NODES = text(
    "INSERT INTO log_nodes (tenant_id, level, idx, hash) SELECT :t, n.l, n.i, n.h "
    "FROM unnest(CAST(:levels AS smallint[]), CAST(:idxs AS bigint[]), "
    "CAST(:hashes AS bytea[])) AS n(l, i, h)"
)
_UPDATE_HEAD = text(
    "UPDATE log_heads SET size = :size, root = :root, updated_at = now() WHERE tenant_id = :t"
)


async def sequence(session: AsyncSession, tenant_id: str, limit: int = 10_000) -> Head:
    """Give up to ``limit`` waiting leaves their indices (in arrival order), store the
    subtrees they complete and the new head; returns the head. Holds the tenant's head row
    lock until the transaction ends, so concurrent sequencers take turns."""
    await session.execute(_MAKE_HEAD, {"t": tenant_id, "empty": translog.EMPTY_ROOT})
    head = (await session.execute(_SELECT_HEAD, {"t": tenant_id})).one()
    old = Head(head.size, head.root)
    pending = (await session.execute(_PENDING, {"t": tenant_id, "n": limit})).all()
    if not pending:
        return old
    new_size = old.size + len(pending)
    ids = [row.id for row in pending]
    indices = list(range(old.size, new_size))
    numbering = {"t": tenant_id, "ids": ids, "idx": indices, "lo": ids[0], "hi": ids[-1]}
    await session.execute(_NUMBER, numbering)
    known = await nodes(session, tenant_id, translog.frontier(old.size))
    made = translog.extend(old.size, known, [translog.leaf_hash(r.digest) for r in pending])
    await session.execute(
        _INSERT_NODES,
        {
            "t": tenant_id,
            "levels": [node[0] for node in made],
            "idxs": [node[1] for node in made],
            "hashes": list(made.values()),
        },
    )
    root = translog.root_from_frontier(new_size, {**known, **made})
    await session.execute(_UPDATE_HEAD, {"t": tenant_id, "size": new_size, "root": root})
    return Head(new_size, root)


async def head(session: AsyncSession, tenant_id: str) -> Head:
    """The tenant's sequenced tree (empty before its first sequencing)."""
    row = (
        await session.execute(
            text("SELECT size, root FROM log_heads WHERE tenant_id = :t"), {"t": tenant_id}
        )
    ).first()
    return Head(row.size, row.root) if row is not None else Head(0, translog.EMPTY_ROOT)


async def nodes(session: AsyncSession, tenant_id: str, wanted: Sequence[Node]) -> dict[Node, bytes]:
    """The stored hashes of these complete subtrees (one query)."""
    if not wanted:
        return {}
    rows = await session.execute(
        text(
            "SELECT n.level, n.idx, n.hash FROM log_nodes n JOIN unnest("
            "CAST(:levels AS smallint[]), CAST(:idxs AS bigint[])) AS w(l, i) "
            "ON n.level = w.l AND n.idx = w.i WHERE n.tenant_id = :t"
        ),
        {"t": tenant_id, "levels": [w[0] for w in wanted], "idxs": [w[1] for w in wanted]},
    )
    return {(row.level, row.idx): row.hash for row in rows}


# --- proofs -----------------------------------------------------------------------------


T = TypeVar("T")


async def _prove(
    session: AsyncSession, tenant_id: str, make: Callable[[translog.SubtreeHashes], T]
) -> T:
    """Run a proof generator twice: once to learn which nodes it needs, then on them."""
    wanted: list[Node] = []

    def record(level: int, idx: int) -> bytes:
        wanted.append((level, idx))
        return bytes(translog.HASH_SIZE)

    make(record)
    found = await nodes(session, tenant_id, sorted(set(wanted)))
    return make(lambda level, idx: found[(level, idx)])


async def inclusion_proof(
    session: AsyncSession, tenant_id: str, index: int, size: int
) -> list[bytes]:
    """The inclusion proof of leaf ``index`` in the tree of ``size`` (<= the head's)."""
    return await _prove(session, tenant_id, lambda get: translog.inclusion_proof(index, size, get))


async def inclusion_proofs(
    session: AsyncSession, tenant_id: str, indices: Sequence[int], size: int
) -> list[list[bytes]]:
    """The inclusion proofs of leaves ``indices`` in the tree of ``size``, their nodes read
    at once."""
    return await _prove(
        session, tenant_id, lambda get: [translog.inclusion_proof(i, size, get) for i in indices]
    )


async def consistency_proof(
    session: AsyncSession, tenant_id: str, old_size: int, new_size: int
) -> list[bytes]:
    """The consistency proof of the tree of ``old_size`` into that of ``new_size``."""
    return await _prove(
        session, tenant_id, lambda get: translog.consistency_proof(old_size, new_size, get)
    )


@dataclass(frozen=True)
class Leaf:
    """A logged object: ``index`` is None until the sequencer numbers it."""

    index: int | None
    kind: str
    ref_id: str
    digest: bytes


_LEAF_COLUMNS = "leaf_index AS index, kind, ref_id, digest"


def _leaf(row: Any) -> Leaf:
    return Leaf(row.index, row.kind, row.ref_id, row.digest)


async def leaf_by_digest(
    session: AsyncSession, tenant_id: str, digest: bytes, size: int
) -> Leaf | None:
    """The first leaf with this data among the first ``size`` leaves."""
    row = (
        await session.execute(
            text(
                f"SELECT {_LEAF_COLUMNS} FROM log_leaves WHERE tenant_id = :t "
                "AND digest = :d AND leaf_index < :size ORDER BY leaf_index LIMIT 1"
            ),
            {"t": tenant_id, "d": digest, "size": size},
        )
    ).first()
    return _leaf(row) if row is not None else None


async def leaf_of(
    session: AsyncSession, tenant_id: str, kind: LeafKind, ref_id: str
) -> Leaf | None:
    """The leaf of one logged object, sequenced or not."""
    row = (
        await session.execute(
            text(
                f"SELECT {_LEAF_COLUMNS} FROM log_leaves WHERE tenant_id = :t "
                "AND kind = :k AND ref_id = :r"
            ),
            {"t": tenant_id, "k": kind, "r": ref_id},
        )
    ).first()
    return _leaf(row) if row is not None else None


async def leaves(session: AsyncSession, tenant_id: str, start: int, end: int) -> list[Leaf]:
    """The sequenced leaves with indices in [start, end), in index order."""
    rows = await session.execute(
        text(
            f"SELECT {_LEAF_COLUMNS} FROM log_leaves WHERE tenant_id = :t "
            "AND leaf_index >= :a AND leaf_index < :b ORDER BY leaf_index"
        ),
        {"t": tenant_id, "a": start, "b": end},
    )
    return [_leaf(row) for row in rows]


# --- checkpoints and cosignatures -------------------------------------------------------


@dataclass(frozen=True)
class StoredCheckpoint:
    size: int
    root: bytes
    note: str


async def sign_checkpoint(
    session: AsyncSession, tenant_id: str, origin: str, key: Ed25519PrivateKey
) -> StoredCheckpoint | None:
    """Sign and store the checkpoint of the tenant's head, if it is larger than the latest
    checkpoint; the new one, or None. Run it after ``sequence`` in the same transaction."""
    current = await head(session, tenant_id)
    latest = await latest_checkpoint(session, tenant_id)
    if current.size == 0 or (latest is not None and latest.size >= current.size):
        return None
    body = translog.checkpoint_body(translog.Checkpoint(origin, current.size, current.root))
    note = translog.sign_note(body, origin, key)
    await session.execute(
        text(
            "INSERT INTO log_checkpoints (tenant_id, size, root, note) "
            "VALUES (:t, :size, :root, :note) ON CONFLICT DO NOTHING"
        ),
        {"t": tenant_id, "size": current.size, "root": current.root, "note": note},
    )
    return StoredCheckpoint(current.size, current.root, note)


async def latest_checkpoint(session: AsyncSession, tenant_id: str) -> StoredCheckpoint | None:
    return await _checkpoint(session, tenant_id, "ORDER BY size DESC LIMIT 1", {})


async def checkpoint_at(
    session: AsyncSession, tenant_id: str, size: int
) -> StoredCheckpoint | None:
    return await _checkpoint(session, tenant_id, "AND size = :size", {"size": size})


async def _checkpoint(
    session: AsyncSession, tenant_id: str, where: str, params: dict[str, Any]
) -> StoredCheckpoint | None:
    row = (
        await session.execute(
            text("SELECT size, root, note FROM log_checkpoints WHERE tenant_id = :t " + where),
            {"t": tenant_id, **params},
        )
    ).first()
    return StoredCheckpoint(row.size, row.root, row.note) if row is not None else None


async def add_cosignature(
    session: AsyncSession, tenant_id: str, size: int, witness: str, line: str
) -> bool:
    """Keep a witness's (verified) cosignature line of the checkpoint of ``size``; False
    when that witness's line is already kept (the first one stays)."""
    added = await session.execute(
        text(
            "INSERT INTO log_cosignatures (tenant_id, size, witness, line) "
            "VALUES (:t, :size, :w, :line) ON CONFLICT DO NOTHING RETURNING 1"
        ),
        {"t": tenant_id, "size": size, "w": witness, "line": line},
    )
    return added.first() is not None


async def cosignature_lines(session: AsyncSession, tenant_id: str, size: int) -> list[str]:
    rows = await session.execute(
        text(
            "SELECT line FROM log_cosignatures WHERE tenant_id = :t AND size = :size "
            "ORDER BY created_at, witness"
        ),
        {"t": tenant_id, "size": size},
    )
    return [row.line for row in rows]


# --- the checkpoint job -----------------------------------------------------------------


async def checkpoint_tenant(
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    origin: str,
    key: Ed25519PrivateKey,
    batch: int = 10_000,
) -> tuple[int, StoredCheckpoint | None]:
    """Sequence all of a tenant's waiting leaves, ``batch`` per transaction, and sign a
    checkpoint in the last one if the tree grew; returns how many leaves were sequenced and
    the new checkpoint. Owns its transactions (a job's boundary, as ``tenant_transaction``)."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        current = await head(session, tenant_id)
        latest = await latest_checkpoint(session, tenant_id)
        pending = (await session.execute(_HAS_PENDING, {"t": tenant_id})).scalar_one()
    if not pending and current.size == (latest.size if latest is not None else 0):
        return 0, None
    start = current.size
    while True:
        async with tenancy.tenant_transaction(sessions, tenant_id) as session:
            before = current.size
            current = await sequence(session, tenant_id, batch)
            if current.size - before < batch:
                signed = await sign_checkpoint(session, tenant_id, origin, key)
                return current.size - start, signed


_HAS_PENDING = text(
    "SELECT EXISTS (SELECT 1 FROM log_leaves WHERE tenant_id = :t AND leaf_index IS NULL)"
)
