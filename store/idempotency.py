"""Idempotency claims: which execution holds a tenant's key, until when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.records import Receipt
from store import db, held
from store.api_keys import AuthenticatedTenant, authenticated
from store.db import table_of
from store.held import HeldReads
from store.models import IdempotencyClaim, ReceiptRow
from store.outputs import Sealed, SealedOutput
from store.receipts import to_receipt


@dataclass(frozen=True)
class Claim:
    key: str
    receipt_id: str
    input_hash: str
    workflow_id: str
    first_seen_at: datetime
    expires_at: datetime
    taken_now: bool = False  # claim_key: this call took it (or re-armed it once expired)


_CLAIMS = table_of(IdempotencyClaim)
_RE_ARMED = ("receipt_id", "input_hash", "workflow_id", "first_seen_at", "expires_at")
# Every execution claims its key: built once, executed with fresh parameters only. Taken
# when free, re-armed once expired; the holder is read when neither.
_NEW_CLAIM = insert(_CLAIMS)
_CLAIM = _NEW_CLAIM.on_conflict_do_update(
    index_elements=[_CLAIMS.c.tenant_id, _CLAIMS.c.idempotency_key],
    set_={k: _NEW_CLAIM.excluded[k] for k in _RE_ARMED},
    where=_CLAIMS.c.expires_at <= bindparam("now"),
).returning(*_CLAIMS.c)
_HOLDER = select(*_CLAIMS.c).where(
    _CLAIMS.c.tenant_id == bindparam("tenant_id"),
    _CLAIMS.c.idempotency_key == bindparam("idempotency_key"),
)


def _claim(row: IdempotencyClaim | Row[Any], *, taken_now: bool = False) -> Claim:
    return Claim(
        key=row.idempotency_key,
        receipt_id=row.receipt_id,
        input_hash=row.input_hash,
        workflow_id=row.workflow_id,
        first_seen_at=row.first_seen_at,
        expires_at=row.expires_at,
        taken_now=taken_now,
    )


async def find_live_claim(
    session: AsyncSession, tenant_id: str, key: str, now: datetime
) -> tuple[Claim, Receipt | None] | None:
    """The unexpired claim on a key, with its receipt once recorded."""
    result = await session.execute(
        select(IdempotencyClaim, ReceiptRow)
        .outerjoin(ReceiptRow, ReceiptRow.id == IdempotencyClaim.receipt_id)
        .where(
            IdempotencyClaim.tenant_id == tenant_id,
            IdempotencyClaim.idempotency_key == key,
            IdempotencyClaim.expires_at > now,
        )
    )
    row = result.one_or_none()
    if row is None:
        return None
    claim, receipt = row
    return _claim(claim), (to_receipt(receipt) if receipt is not None else None)


_RECEIPT_COLUMNS = tuple(c.name for c in table_of(ReceiptRow).c)
_CLAIM_COLUMNS = ("idempotency_key", "receipt_id", "input_hash", "workflow_id")
_CLAIM_TIMES = ("first_seen_at", "expires_at")
# What a replay answers from: the live claim on a key, its receipt and its kept output.
_REPLAY = (
    "SELECT "
    + ", ".join(f"k.{c}" for c in (*_CLAIM_COLUMNS, *_CLAIM_TIMES))
    + ", r.id IS NOT NULL AS recorded, "
    + ", ".join(f"r.{c}" for c in _RECEIPT_COLUMNS)
    + ", o.key_id, o.sealed, o.expires_at"
    " FROM idempotency_keys k"
    " LEFT JOIN receipts r ON r.id = k.receipt_id"
    " LEFT JOIN execution_outputs o ON o.receipt_id = r.id AND o.tenant_id = %(tenant)s"
    " AND o.expires_at > %(now)s"
    " WHERE k.tenant_id = %(tenant)s AND k.idempotency_key = %(key)s AND k.expires_at > %(now)s"
)


Replay = tuple[Claim, Receipt | None, Sealed | None]


async def find_replay(
    session: AsyncSession, tenant_id: str, key: str, now: datetime
) -> Replay | None:
    """``find_live_claim`` with the receipt's kept output (sealed; None once expired), in
    one statement: what a replay answers from."""
    params = {"tenant": tenant_id, "key": key, "now": now}
    [row] = await db.pipelined(session, [(_REPLAY, params)])
    return _replay_of(row, tenant_id) if row is not None else None


# ``_REPLAY`` on a held connection (``held``), led by the tenant it ran scoped to, and
# followed by the key's lookup (``api_keys.SCOPED_LOOKUP``'s columns) unless the key holds
# a recorded receipt: ``OFFSET 0`` keeps the lookup's subquery whole, so that its condition
# gates the function scan (a one-time filter), which a replay does not run.
_HELD_REPLAY = (
    f"SELECT {held.SCOPE}, x.*, a.tenant_id, a.revoked_at, a.policy_mode,"
    " a.idempotency_ttl_seconds, a.scopes FROM (SELECT 1) one"
    " LEFT JOIN LATERAL (" + _REPLAY + ") x ON true"
    " LEFT JOIN LATERAL (SELECT * FROM moat_lookup_api_key(%(key_id)s, %(secret_hash)s)"
    " WHERE x.recorded IS NOT TRUE OFFSET 0) a ON true"
)
_LOOKUP_COLUMNS = 5


async def replay_authenticated(
    reads: HeldReads, lookup: Mapping[str, str], tenant_id: str, key: str, now: datetime
) -> tuple[Replay | None, AuthenticatedTenant | None] | None:
    """``find_replay`` in one statement on a connection held scoped to ``tenant_id``
    (``held``), whose key the presented one was verified to be moments ago; unless the key
    holds a recorded receipt, the presented key is authenticated in the same statement
    (``api_keys.authenticate``, with its ``lookup_params``).

    The replay (None: no live claim holds the key) and the key's tenant when looked up
    (None: not looked up, or unknown or revoked now); None when not read (no held
    connection free, or the key is another tenant's): read it in a transaction."""
    params = {**lookup, "tenant": tenant_id, "key": key, "now": now}
    row = await reads.read(tenant_id, _HELD_REPLAY, params)
    if row is None:
        return None
    auth = row[-_LOOKUP_COLUMNS:]
    tenant = authenticated(auth if auth[0] is not None else None, lookup["key_id"])
    if tenant is not None and tenant.tenant_id != tenant_id:
        return None
    return _replay_of(row[1:-_LOOKUP_COLUMNS], tenant_id), tenant


def _replay_of(row: Sequence[Any], tenant_id: str) -> Replay | None:
    """A ``_REPLAY`` row as the claim, its receipt and its kept output (None: no claim)."""
    n_claim = len(_CLAIM_COLUMNS) + len(_CLAIM_TIMES)
    if row[0] is None:  # the claim's key: a claim always has one
        return None
    claim = Claim(*row[:n_claim])
    if not row[n_claim]:
        return claim, None, None
    start = n_claim + 1
    receipt_row = dict(
        zip(_RECEIPT_COLUMNS, row[start : start + len(_RECEIPT_COLUMNS)], strict=True)
    )
    receipt = Receipt.model_validate(receipt_row)
    key_id, sealed, expires_at = row[start + len(_RECEIPT_COLUMNS) :]
    if sealed is None:
        return claim, receipt, None
    output = SealedOutput(receipt.id, tenant_id, key_id, bytes(sealed), expires_at)
    return claim, receipt, output


async def find_claim_by_receipt(
    session: AsyncSession, tenant_id: str, receipt_id: str
) -> Claim | None:
    """The claim an execution made on its key (a run still in progress has no receipt)."""
    row = (
        await session.execute(
            select(IdempotencyClaim).where(
                IdempotencyClaim.tenant_id == tenant_id,
                IdempotencyClaim.receipt_id == receipt_id,
            )
        )
    ).scalar_one_or_none()
    return _claim(row) if row is not None else None


async def claim_key(
    session: AsyncSession,
    *,
    tenant_id: str,
    key: str,
    receipt_id: str,
    input_hash: str,
    workflow_id: str,
    now: datetime,
    ttl_seconds: int,
) -> Claim:
    """Claim a key for an execution, or re-arm it once expired; returns the holder.

    The holder is this execution when its ``receipt_id`` comes back, another one otherwise.
    """
    values = claim_params(
        tenant_id=tenant_id,
        key=key,
        receipt_id=receipt_id,
        input_hash=input_hash,
        workflow_id=workflow_id,
        now=now,
        ttl_seconds=ttl_seconds,
    )
    won = (await session.execute(_CLAIM, values)).first()
    if won is not None:
        return _claim(won, taken_now=True)
    held = (await session.execute(_HOLDER, values)).first()
    assert held is not None
    return _claim(held)


# ``claim_key`` with the holder's receipt, in one statement of driver SQL (``db.pipelined``):
# the key taken when free or re-armed once expired, else its holder read FOR UPDATE, which
# reads the version the claim's conflict saw (a concurrent re-arm's). No row comes back when
# the holder was inserted by a transaction that committed after the statement began (the
# statement's snapshot does not see it): ``holder`` reads it then.
_CLAIM_VALUES = ("tenant_id", *_CLAIM_COLUMNS, *_CLAIM_TIMES)
_HOLDER_COLUMNS = ", ".join(f"k.{c}" for c in (*_CLAIM_COLUMNS, *_CLAIM_TIMES))
CLAIM_WITH_RECEIPT = (
    "WITH won AS (INSERT INTO idempotency_keys AS k (" + ", ".join(_CLAIM_VALUES) + ")"
    " VALUES (" + ", ".join(f"%({c})s" for c in _CLAIM_VALUES) + ")"
    " ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _RE_ARMED)
    + " WHERE k.expires_at <= %(now)s RETURNING true AS taken_now, "
    + _HOLDER_COLUMNS
    + "), held AS (SELECT false AS taken_now, "
    + _HOLDER_COLUMNS
    + " FROM idempotency_keys k"
    " WHERE k.tenant_id = %(tenant_id)s AND k.idempotency_key = %(idempotency_key)s"
    " AND NOT EXISTS (SELECT 1 FROM won) FOR UPDATE),"
    " holder AS (SELECT * FROM won UNION ALL SELECT * FROM held)"
    " SELECT h.*, r.id IS NOT NULL AS recorded, "
    + ", ".join(f"r.{c}" for c in _RECEIPT_COLUMNS)
    + " FROM holder h LEFT JOIN receipts r ON r.id = h.receipt_id AND r.tenant_id = %(tenant_id)s"
)


def claim_params(
    *,
    tenant_id: str,
    key: str,
    receipt_id: str,
    input_hash: str,
    workflow_id: str,
    now: datetime,
    ttl_seconds: int,
) -> dict[str, Any]:
    """The parameters of a key's claim (``claim_key``, ``CLAIM_WITH_RECEIPT``)."""
    return {
        "tenant_id": tenant_id,
        "idempotency_key": key,
        "receipt_id": receipt_id,
        "input_hash": input_hash,
        "workflow_id": workflow_id,
        "first_seen_at": now,
        "expires_at": now + timedelta(seconds=ttl_seconds),
        "now": now,
    }


def claimed(row: Sequence[Any] | None) -> tuple[Claim, Receipt | None] | None:
    """A ``CLAIM_WITH_RECEIPT`` row as the holder's claim and its receipt once recorded
    (None: no row, the holder is to be read with ``holder``)."""
    if row is None:
        return None
    n_claim = 1 + len(_CLAIM_COLUMNS) + len(_CLAIM_TIMES)
    key, receipt_id, input_hash, workflow_id, first_seen_at, expires_at = row[1:n_claim]
    claim = Claim(key, receipt_id, input_hash, workflow_id, first_seen_at, expires_at, row[0])
    if not row[n_claim]:
        return claim, None
    receipt = dict(zip(_RECEIPT_COLUMNS, row[n_claim + 1 :], strict=True))
    return claim, Receipt.model_validate(receipt)


async def holder(session: AsyncSession, tenant_id: str, key: str) -> Claim:
    """The claim on a key ``CLAIM_WITH_RECEIPT`` found held but could not read."""
    row = (await session.execute(_HOLDER, {"tenant_id": tenant_id, "idempotency_key": key})).first()
    assert row is not None
    return _claim(row)
