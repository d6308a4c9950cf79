"""Queries. Each takes the session first and only flushes; the caller commits."""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from sqlalchemy import delete, func, select, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from schemas.api import ApiKeyInfo, NewApiKey, TenantInfo
from schemas.records import OutcomeEvent, Receipt
from store.models import (
    ApiKey,
    Budget,
    BudgetHold,
    BudgetUsage,
    IdempotencyClaim,
    OutcomeEventRow,
    PolicyDecisionRow,
    ReceiptRow,
    Tenant,
)

API_KEY_PREFIX = "moat"
_ID_ALPHABET = string.ascii_lowercase + string.digits


# --- the tenant of a transaction (row-level security) ---------------------------------


async def set_tenant(session: AsyncSession, tenant_id: str) -> None:
    """Scope the rest of the session's transaction to one tenant.

    Row-level security lets the application role see and write only the rows of the tenant
    named here; unset, it sees nothing. Call it first in every transaction of the app role.
    """
    await session.execute(
        text("SELECT set_config('moat.tenant_id', :tenant, true)"), {"tenant": tenant_id}
    )


@asynccontextmanager
async def tenant_transaction(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str
) -> AsyncIterator[AsyncSession]:
    """``async with tenant_transaction(sessions, tenant) as session``: a transaction scoped to
    ``tenant``, committed on success."""
    async with sessions.begin() as session:
        await set_tenant(session, tenant_id)
        yield session


# --- tenants and API keys -------------------------------------------------------------


def _new_tenant_id() -> str:
    return "ten_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


async def create_tenant(
    session: AsyncSession,
    name: str,
    *,
    idempotency_ttl_seconds: int = 86400,
    policy_mode: str = "standard",
) -> Tenant:
    """Create a tenant; the rest of the transaction is scoped to it (``set_tenant``)."""
    tenant_id = _new_tenant_id()
    await set_tenant(session, tenant_id)
    # ``allow_bypass`` is left to the column default: only the owner role may set it.
    tenant = Tenant(
        id=tenant_id,
        name=name,
        policy_mode=policy_mode,
        idempotency_ttl_seconds=idempotency_ttl_seconds,
    )
    session.add(tenant)
    await session.flush()
    return tenant


async def get_tenant(session: AsyncSession, tenant_id: str) -> Tenant | None:
    return await session.get(Tenant, tenant_id)


async def set_http_allow_hosts(
    session: AsyncSession, tenant_id: str, hosts: list[str]
) -> Tenant | None:
    """Replace a tenant's allow-list (entries already normalized); None for no such tenant.
    Only the owner role may write the column: the application role's UPDATE is refused."""
    tenant = await get_tenant(session, tenant_id)
    if tenant is not None:
        tenant.http_allow_hosts = hosts
        await session.flush()
    return tenant


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# The application role may not read ``secret_hash``: queries it runs load keys without it.
_WITHOUT_HASH = defer(ApiKey.secret_hash, raiseload=True)


async def list_tenants(session: AsyncSession) -> Sequence[Tenant]:
    """Every tenant, oldest first: the operators' directory across tenants, read through
    ``moat_list_tenants()`` (row-level security keeps the table itself closed)."""
    stmt = select(Tenant).from_statement(text("SELECT * FROM moat_list_tenants()"))
    return (await session.execute(stmt)).scalars().all()


async def find_tenant(session: AsyncSession, id_or_name: str) -> Tenant | None:
    """The tenant with this id, else with this name (an operator's lookup across tenants)."""
    tenants = await list_tenants(session)
    by_id = next((t for t in tenants if t.id == id_or_name), None)
    return by_id or next((t for t in tenants if t.name == id_or_name), None)


def key_prefix(key_id: str) -> str:
    """The public, non-secret start of a key: ``moat_<id>_``."""
    return f"{API_KEY_PREFIX}_{key_id}_"


def to_tenant_info(row: Tenant) -> TenantInfo:
    return TenantInfo.model_validate(row, from_attributes=True)


def to_key_info(row: ApiKey) -> ApiKeyInfo:
    """A key as listed: id, public prefix, dates; never the secret or its hash."""
    return ApiKeyInfo(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        prefix=key_prefix(row.id),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def to_new_key(row: ApiKey, secret: str) -> NewApiKey:
    """A key just issued: as listed, plus its secret (shown this once)."""
    return NewApiKey(**to_key_info(row).model_dump(), api_key=secret)


async def issue_api_key(
    session: AsyncSession, tenant_id: str, name: str = ""
) -> tuple[ApiKey, str]:
    """Create a key; returns its row and the full key (``moat_<id>_<secret>``), which exists
    only here: the database keeps the secret's hash."""
    key_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
    secret = secrets.token_urlsafe(32)
    row = ApiKey(id=key_id, tenant_id=tenant_id, secret_hash=_hash_secret(secret), name=name)
    session.add(row)
    await session.flush()
    await session.refresh(row, ["created_at", "revoked_at"])
    return row, key_prefix(key_id) + secret


async def create_api_key(session: AsyncSession, tenant_id: str, name: str = "") -> str:
    """Create a key and return it in full (``moat_<id>_<secret>``); only its hash is kept."""
    return (await issue_api_key(session, tenant_id, name))[1]


async def key_tenant(session: AsyncSession, key_id: str) -> str | None:
    """The tenant an API key id belongs to (revoked or not), before any tenant is set."""
    if not storable(key_id):
        return None
    result = await session.execute(text("SELECT moat_api_key_tenant(:key_id)"), {"key_id": key_id})
    tenant_id: str | None = result.scalar_one()
    return tenant_id


async def list_api_keys(session: AsyncSession, tenant_id: str) -> Sequence[ApiKey]:
    result = await session.execute(
        select(ApiKey)
        .options(_WITHOUT_HASH)
        .where(ApiKey.tenant_id == tenant_id)
        .order_by(ApiKey.created_at, ApiKey.id)
    )
    return result.scalars().all()


async def revoke_api_key(session: AsyncSession, key_id: str, now: datetime) -> ApiKey | None:
    """Revoke a key at ``now`` (kept when already revoked); None if there is no such key."""
    await session.execute(
        update(ApiKey)
        .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return await session.get(ApiKey, key_id, populate_existing=True, options=[_WITHOUT_HASH])


@dataclass(frozen=True)
class AuthenticatedTenant:
    tenant_id: str
    key_id: str
    policy_mode: str
    idempotency_ttl_seconds: int


async def authenticate(session: AsyncSession, presented: str) -> AuthenticatedTenant | None:
    """The tenant a presented API key belongs to, or None (unknown, malformed, revoked).

    Asked before any tenant is known, so through ``moat_lookup_api_key``, the database's
    one door to API keys across tenants (row-level security keeps the tables closed). The
    database compares the hashes: the stored one never leaves it."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX or not parts[1] or not parts[2]:
        return None
    if not storable(parts[1]) or not storable(parts[2]):
        return None
    row = (
        await session.execute(
            text(
                "SELECT tenant_id, revoked_at, policy_mode, idempotency_ttl_seconds"
                " FROM moat_lookup_api_key(:key_id, :secret_hash)"
            ),
            {"key_id": parts[1], "secret_hash": _hash_secret(parts[2])},
        )
    ).one_or_none()
    if row is None:
        return None
    tenant_id, revoked_at, mode, ttl = row
    if revoked_at is not None:
        return None
    return AuthenticatedTenant(
        tenant_id=tenant_id, key_id=parts[1], policy_mode=mode, idempotency_ttl_seconds=ttl
    )


def storable(value: str) -> bool:
    """Text Postgres can hold: no NUL, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


# --- idempotency ----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    key: str
    receipt_id: str
    input_hash: str
    workflow_id: str
    first_seen_at: datetime
    expires_at: datetime
    taken_now: bool = False  # claim_key: this call took it (or re-armed it once expired)


def _claim(row: IdempotencyClaim, *, taken_now: bool = False) -> Claim:
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
    values = {
        "tenant_id": tenant_id,
        "idempotency_key": key,
        "receipt_id": receipt_id,
        "input_hash": input_hash,
        "workflow_id": workflow_id,
        "first_seen_at": now,
        "expires_at": now + timedelta(seconds=ttl_seconds),
    }
    stmt = insert(IdempotencyClaim).values(**values)
    upsert = stmt.on_conflict_do_update(
        index_elements=[IdempotencyClaim.tenant_id, IdempotencyClaim.idempotency_key],
        set_={
            k: stmt.excluded[k]
            for k in ("receipt_id", "input_hash", "workflow_id", "first_seen_at", "expires_at")
        },
        where=IdempotencyClaim.expires_at <= now,
    ).returning(IdempotencyClaim)
    won = (await session.execute(upsert)).scalar_one_or_none()
    if won is not None:
        return _claim(won, taken_now=True)
    held = await session.get(IdempotencyClaim, (tenant_id, key), populate_existing=True)
    assert held is not None
    return _claim(held)


# --- receipts and outcome events ------------------------------------------------------


def to_receipt(row: ReceiptRow) -> Receipt:
    return Receipt.model_validate(row, from_attributes=True)


async def insert_receipt(session: AsyncSession, receipt: Receipt) -> bool:
    """Insert a receipt; False when one with this id already exists (a retried step)."""
    stmt = (
        insert(ReceiptRow)
        .values(**receipt.model_dump(mode="python"))
        .on_conflict_do_nothing(index_elements=[ReceiptRow.id])
        .returning(ReceiptRow.id)
    )
    return (await session.execute(stmt)).scalar_one_or_none() is not None


async def get_receipt(session: AsyncSession, tenant_id: str, receipt_id: str) -> Receipt | None:
    row = (
        await session.execute(
            select(ReceiptRow).where(ReceiptRow.id == receipt_id, ReceiptRow.tenant_id == tenant_id)
        )
    ).scalar_one_or_none()
    return to_receipt(row) if row is not None else None


@dataclass(frozen=True)
class ReceiptFilter:
    capability_id: str | None = None
    status: str | None = None
    idempotency_key: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def list_receipts(
    session: AsyncSession,
    tenant_id: str,
    where: ReceiptFilter,
    *,
    limit: int,
    after: tuple[datetime, str] | None = None,
) -> list[Receipt]:
    """Receipts newest first (``timestamp``, then id), from just after ``after`` on.

    ``since`` is inclusive, ``until`` exclusive. Asks for ``limit`` rows; a caller that
    wants to know whether more follow asks for one more."""
    stmt = select(ReceiptRow).where(ReceiptRow.tenant_id == tenant_id)
    if where.capability_id is not None:
        stmt = stmt.where(ReceiptRow.capability_id == where.capability_id)
    if where.status is not None:
        stmt = stmt.where(ReceiptRow.status == where.status)
    if where.idempotency_key is not None:
        stmt = stmt.where(ReceiptRow.idempotency_key == where.idempotency_key)
    if where.since is not None:
        stmt = stmt.where(ReceiptRow.timestamp >= where.since)
    if where.until is not None:
        stmt = stmt.where(ReceiptRow.timestamp < where.until)
    if after is not None:
        stmt = stmt.where(tuple_(ReceiptRow.timestamp, ReceiptRow.id) < tuple_(*after))
    stmt = stmt.order_by(ReceiptRow.timestamp.desc(), ReceiptRow.id.desc()).limit(limit)
    return [to_receipt(row) for row in (await session.execute(stmt)).scalars()]


async def insert_outcome_event(session: AsyncSession, event: OutcomeEvent) -> None:
    session.add(OutcomeEventRow(**event.model_dump(mode="python")))
    await session.flush()


# --- policy decisions -----------------------------------------------------------------


async def insert_policy_decision(
    session: AsyncSession,
    *,
    id: str,
    tenant_id: str,
    receipt_id: str,
    capability_id: str,
    idempotency_key: str,
    mode: str,
    decision: str,
    rule_hit: str,
    reason: str = "",
    is_synthetic: bool = False,
) -> PolicyDecisionRow:
    """Record a decision; a retried step with the same id gets the first one back."""
    stmt = (
        insert(PolicyDecisionRow)
        .values(
            id=id,
            tenant_id=tenant_id,
            receipt_id=receipt_id,
            capability_id=capability_id,
            idempotency_key=idempotency_key,
            mode=mode,
            decision=decision,
            rule_hit=rule_hit,
            reason=reason,
            is_synthetic=is_synthetic,
        )
        .on_conflict_do_nothing(index_elements=[PolicyDecisionRow.id])
    )
    await session.execute(stmt)
    row = await session.get(PolicyDecisionRow, id)
    assert row is not None
    return row


# --- budgets ---------------------------------------------------------------------------


def period_start(period: str, now: datetime) -> date:
    today = now.date()
    return today.replace(day=1) if period == "month" else today


async def set_budget(
    session: AsyncSession, tenant_id: str, capability_id: str, limit: int, period: str
) -> None:
    stmt = insert(Budget).values(
        tenant_id=tenant_id, capability_id=capability_id, limit=limit, period=period
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[Budget.tenant_id, Budget.capability_id],
        set_={
            "limit": stmt.excluded.limit,
            "period": stmt.excluded.period,
            "updated_at": func.now(),
        },
    )
    await session.execute(stmt)


@dataclass(frozen=True)
class BudgetState:
    limit: int
    period: str
    period_start: date
    used: int
    held: int = 0  # executions allowed and not recorded yet

    @property
    def exhausted(self) -> bool:
        return self.used + self.held >= self.limit


async def budget_state(
    session: AsyncSession,
    tenant_id: str,
    capability_id: str,
    now: datetime,
    *,
    lock: bool = False,
    exclude_receipt: str | None = None,
) -> BudgetState | None:
    """The budget of a capability in the current period: successes counted, and units held
    by executions in flight (other than ``exclude_receipt``). ``lock`` takes the budget row
    FOR UPDATE, so concurrent checks of one budget see each other's holds."""
    query = select(Budget).where(
        Budget.tenant_id == tenant_id, Budget.capability_id == capability_id
    )
    budget = (
        await session.execute(query.with_for_update() if lock else query)
    ).scalar_one_or_none()
    if budget is None:
        return None
    return await _state_of(session, budget, now, exclude_receipt)


async def _state_of(
    session: AsyncSession, budget: Budget, now: datetime, exclude_receipt: str | None = None
) -> BudgetState:
    tenant_id, capability_id = budget.tenant_id, budget.capability_id
    start = period_start(budget.period, now)
    # Uses and holds in one statement, so one snapshot: the record step turns a hold into a
    # use in one transaction, and a check must never see neither (it would overshoot). The
    # snapshot is taken after the lock above was granted, so it sees every hold committed
    # by the checks this one waited for.
    used_query = (
        select(BudgetUsage.used)
        .where(
            BudgetUsage.tenant_id == tenant_id,
            BudgetUsage.capability_id == capability_id,
            BudgetUsage.period == budget.period,
            BudgetUsage.period_start == start,
        )
        .scalar_subquery()
    )
    holds = select(func.count()).where(
        BudgetHold.tenant_id == tenant_id,
        BudgetHold.capability_id == capability_id,
        BudgetHold.period == budget.period,
        BudgetHold.period_start == start,
        BudgetHold.expires_at > now,
    )
    if exclude_receipt is not None:
        holds = holds.where(BudgetHold.receipt_id != exclude_receipt)
    statement = select(func.coalesce(used_query, 0), holds.scalar_subquery())
    row = (await session.execute(statement)).one()
    return BudgetState(
        limit=budget.limit,
        period=budget.period,
        period_start=start,
        used=int(row[0]),
        held=int(row[1]),
    )


async def list_budgets(
    session: AsyncSession, tenant_id: str, now: datetime
) -> list[tuple[str, BudgetState]]:
    """Every budget of a tenant with its state in the current period, by capability."""
    budgets = (
        await session.execute(
            select(Budget).where(Budget.tenant_id == tenant_id).order_by(Budget.capability_id)
        )
    ).scalars()
    return [(b.capability_id, await _state_of(session, b, now)) for b in budgets.all()]


async def hold_budget(
    session: AsyncSession,
    tenant_id: str,
    capability_id: str,
    receipt_id: str,
    state: BudgetState,
    expires_at: datetime,
) -> None:
    """Hold one unit for an allowed execution (once: a retried check finds it there), and
    drop the budget's expired holds (left by runs that ended without recording)."""
    await session.execute(
        delete(BudgetHold).where(
            BudgetHold.tenant_id == tenant_id,
            BudgetHold.capability_id == capability_id,
            BudgetHold.expires_at <= func.now(),
        )
    )
    stmt = insert(BudgetHold).values(
        tenant_id=tenant_id,
        receipt_id=receipt_id,
        capability_id=capability_id,
        period=state.period,
        period_start=state.period_start,
        expires_at=expires_at,
    )
    await session.execute(stmt.on_conflict_do_nothing())


async def release_budget_hold(session: AsyncSession, tenant_id: str, receipt_id: str) -> None:
    await session.execute(
        delete(BudgetHold).where(
            BudgetHold.tenant_id == tenant_id, BudgetHold.receipt_id == receipt_id
        )
    )


async def increment_budget(
    session: AsyncSession, tenant_id: str, capability_id: str, now: datetime
) -> None:
    """Count one successful execution against the budget of its period, if one is set."""
    budget = await session.get(Budget, (tenant_id, capability_id))
    if budget is None:
        return
    stmt = insert(BudgetUsage).values(
        tenant_id=tenant_id,
        capability_id=capability_id,
        period=budget.period,
        period_start=period_start(budget.period, now),
        used=1,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[
            BudgetUsage.tenant_id,
            BudgetUsage.capability_id,
            BudgetUsage.period,
            BudgetUsage.period_start,
        ],
        set_={"used": BudgetUsage.used + 1},
    )
    await session.execute(stmt)


async def ensure_outcome_partitions(session: AsyncSession, now: datetime, months: int = 3) -> None:
    await session.execute(select(func.moat_ensure_outcome_partitions(now, months)))
