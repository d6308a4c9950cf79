"""SQLAlchemy 2 tables. Alembic revisions under ``store/migrations`` create them.

Receipts, outcome events and policy decisions are write-once: triggers in the migration
make the database itself reject UPDATE and DELETE on them.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _tz() -> DateTime:
    return DateTime(timezone=True)


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    policy_mode: Mapped[str] = mapped_column(String(16), default="standard")
    # Set by the owner role only; the application role cannot write it (column privileges).
    allow_bypass: Mapped[bool] = mapped_column(Boolean, server_default=false())
    idempotency_ttl_seconds: Mapped[int] = mapped_column(Integer, default=86400)
    retention_mode: Mapped[str] = mapped_column(String(16), default="standard")
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    # Server default only: the application role may not write this column, so an INSERT
    # must leave it out.
    http_allow_hosts: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    # What the key may do (schemas.scopes); set when the key is created, never changed.
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{execute:*}'"))


class IdempotencyClaim(Base):
    """Which execution holds a tenant's idempotency key, until when. Re-armed after the TTL."""

    __tablename__ = "idempotency_keys"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(256), primary_key=True)
    receipt_id: Mapped[str] = mapped_column(String(64))
    input_hash: Mapped[str] = mapped_column(String(80))
    workflow_id: Mapped[str] = mapped_column(String(300))
    first_seen_at: Mapped[datetime] = mapped_column(_tz())
    expires_at: Mapped[datetime] = mapped_column(_tz())


class ReceiptRow(Base):
    __tablename__ = "receipts"
    __table_args__ = (
        Index("ix_receipts_tenant_key", "tenant_id", "idempotency_key", "timestamp"),
        Index("ix_receipts_tenant_time", "tenant_id", "timestamp"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    capability_id: Mapped[str] = mapped_column(String(200))
    capability_version: Mapped[str] = mapped_column(String(50))
    adapter_id: Mapped[str] = mapped_column(String(100))
    connection_id: Mapped[str] = mapped_column(String(200))
    request_id: Mapped[str] = mapped_column(String(64))
    timestamp: Mapped[datetime] = mapped_column(_tz())
    latency_ms: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str] = mapped_column(String(256))
    input_hash: Mapped[str] = mapped_column(String(80))
    output_hash: Mapped[str | None] = mapped_column(String(80), nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    policy_decision_id: Mapped[str] = mapped_column(String(64))
    is_synthetic: Mapped[bool] = mapped_column(Boolean, default=False)
    workflow_id: Mapped[str] = mapped_column(String(300))
    run_id: Mapped[str] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(64))
    provider_evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    recorded_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class OutcomeEventRow(Base):
    """Partitioned by month on ``timestamp`` (declared in the migration)."""

    __tablename__ = "outcome_events"
    __table_args__ = (
        Index(
            "ix_outcome_events_capability_time", "capability_id", "capability_version", "timestamp"
        ),
        {"postgresql_partition_by": "RANGE (timestamp)"},
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    timestamp: Mapped[datetime] = mapped_column(_tz(), primary_key=True)
    receipt_id: Mapped[str] = mapped_column(String(64))
    tenant_id: Mapped[str] = mapped_column(String(64))
    capability_id: Mapped[str] = mapped_column(String(200))
    capability_version: Mapped[str] = mapped_column(String(50))
    adapter_id: Mapped[str] = mapped_column(String(100))
    success: Mapped[bool] = mapped_column(Boolean)
    latency_ms: Mapped[int] = mapped_column(Integer)
    error_taxonomy: Mapped[str] = mapped_column(String(40))
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    is_synthetic: Mapped[bool] = mapped_column(Boolean, default=False)
    # When the event was written (migration 0012): the trust rollup finds new events by it.
    recorded_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class PolicyDecisionRow(Base):
    __tablename__ = "policy_decisions"
    __table_args__ = (
        Index("ix_policy_decisions_tenant_time", "tenant_id", "created_at"),
        # The pending-approvals quota's reservations (migration 0014).
        Index(
            "ix_policy_decisions_awaiting_approval",
            "tenant_id",
            "created_at",
            postgresql_where=text("rule_hit = 'APPROVAL_REQUIRED'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    receipt_id: Mapped[str] = mapped_column(String(64), index=True)
    capability_id: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str] = mapped_column(String(256))
    mode: Mapped[str] = mapped_column(String(16))
    decision: Mapped[str] = mapped_column(String(16))
    rule_hit: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    is_synthetic: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    # 0: the tenant's mode from before it had a policy document (migration 0010).
    policy_version: Mapped[int] = mapped_column(Integer, server_default=text("0"))


class PolicyVersionRow(Base):
    """One version of a tenant's policy document; write-once (migration 0010)."""

    __tablename__ = "policy_versions"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    mode: Mapped[str] = mapped_column(String(16))
    document: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class ApprovalRow(Base):
    """A person's approval an execution waits for. Leaves ``pending`` once, and only its
    status and decider's columns change (migration 0010). The redacted input a person is
    shown is sealed with the codec's keys, like kept outputs."""

    __tablename__ = "approvals"
    __table_args__ = (Index("ix_approvals_tenant_status", "tenant_id", "status", "requested_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    receipt_id: Mapped[str] = mapped_column(String(64), unique=True)
    workflow_id: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(16))
    capability_id: Mapped[str] = mapped_column(String(200))
    capability_version: Mapped[str] = mapped_column(String(50))
    input_hash: Mapped[str] = mapped_column(String(80))
    policy_version: Mapped[int] = mapped_column(Integer)
    requested_by: Mapped[str] = mapped_column(String(100))
    allow_self_approval: Mapped[bool] = mapped_column(Boolean, server_default=false())
    input_key_id: Mapped[str] = mapped_column(String(100))
    input_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    requested_at: Mapped[datetime] = mapped_column(_tz())
    expires_at: Mapped[datetime] = mapped_column(_tz())
    decided_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    comment: Mapped[str | None] = mapped_column(Text, nullable=True)
    approved_digest: Mapped[str | None] = mapped_column(String(80), nullable=True)


class Budget(Base):
    __tablename__ = "budgets"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    capability_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    limit: Mapped[int] = mapped_column(BigInteger)
    period: Mapped[str] = mapped_column(String(8))
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class BudgetUsage(Base):
    __tablename__ = "budget_usage"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    capability_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    period: Mapped[str] = mapped_column(String(8), primary_key=True)
    period_start: Mapped[date] = mapped_column(Date, primary_key=True)
    used: Mapped[int] = mapped_column(BigInteger, default=0)


class BudgetHold(Base):
    """One unit of a budget held by an allowed execution until it records (migration 0004)."""

    __tablename__ = "budget_holds"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    receipt_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    capability_id: Mapped[str] = mapped_column(String(200))
    period: Mapped[str] = mapped_column(String(8))
    period_start: Mapped[date] = mapped_column(Date)
    expires_at: Mapped[datetime] = mapped_column(_tz())
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class OrchestrationEvent(Base):
    """The event log: append-only (the database refuses UPDATE and DELETE)."""

    __tablename__ = "orchestration_events"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    event_type: Mapped[str] = mapped_column(String(100))
    aggregate_type: Mapped[str] = mapped_column(String(50))
    aggregate_id: Mapped[str] = mapped_column(String(300))
    event_data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    correlation_id: Mapped[str] = mapped_column(String(64))
    causation_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actor: Mapped[str] = mapped_column(String(100))
    occurred_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    sequence_number: Mapped[int] = mapped_column(BigInteger, Identity(always=True), unique=True)


class RunRow(Base):
    """The projection of an execution's events; rebuildable from them."""

    __tablename__ = "runs"

    receipt_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    workflow_id: Mapped[str] = mapped_column(String(300))
    run_id: Mapped[str] = mapped_column(String(64))
    capability_id: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    total_steps: Mapped[int] = mapped_column(Integer, default=0)
    failed_steps: Mapped[int] = mapped_column(Integer, default=0)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    replays: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(_tz())
    completed_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    last_sequence: Mapped[int] = mapped_column(BigInteger)


class ManifestRow(Base):
    """Where a run's signed manifest is, and its digest."""

    __tablename__ = "manifests"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    receipt_id: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(80))
    kid: Mapped[str] = mapped_column(String(100))
    alg: Mapped[str] = mapped_column(String(10))
    replayed: Mapped[bool] = mapped_column(Boolean)
    outcome: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class ExecutionOutputRow(Base):
    """The redacted output of an execution, sealed with the codec's keys (``store.outputs``),
    kept while its idempotency key is: the one place Moat keeps what a provider answered."""

    __tablename__ = "execution_outputs"
    __table_args__ = (Index("ix_execution_outputs_tenant_expiry", "tenant_id", "expires_at"),)

    receipt_id: Mapped[str] = mapped_column(ForeignKey("receipts.id"), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    key_id: Mapped[str] = mapped_column(String(100))
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    expires_at: Mapped[datetime] = mapped_column(_tz())
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class ConnectionRow(Base):
    """A tenant's credential for one provider: the secret only sealed (AES-256-GCM, the key
    id beside it), never in the clear (``store.connections``). A revoked row is kept and
    never changes again (a trigger)."""

    __tablename__ = "connections"
    __table_args__ = (Index("ix_connections_tenant_created", "tenant_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    type: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'"))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    nonce: Mapped[bytes] = mapped_column(LargeBinary)
    key_id: Mapped[str] = mapped_column(String(100))
    fingerprint: Mapped[str] = mapped_column(String(80))
    last4: Mapped[str] = mapped_column(String(4), server_default=text("''"))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    rotated_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    # Set when the provider refused the grant for good: a person must connect it again.
    needs_reauth_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    needs_reauth_reason: Mapped[str | None] = mapped_column(String(200), nullable=True)


class WebhookSubscription(Base):
    """A tenant's webhook endpoint (migration 0011). Its signing secrets are kept sealed
    with the codec's keys; the previous one signs beside the new until it expires."""

    __tablename__ = "webhook_subscriptions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(ARRAY(Text))
    status: Mapped[str] = mapped_column(String(16), default="active")
    disabled_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    secret_kid: Mapped[str] = mapped_column(String(100))
    secret_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    previous_secret_kid: Mapped[str | None] = mapped_column(String(100), nullable=True)
    previous_secret_sealed: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    previous_secret_expires_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    max_retries: Mapped[int] = mapped_column(Integer, default=3)
    retry_base_seconds: Mapped[float] = mapped_column(Float, default=2.0)
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class OutboxRow(Base):
    """One event for one subscription, written in the transaction of the state change it
    announces; ``seq`` orders the events of an aggregate."""

    __tablename__ = "outbox"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), unique=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    subscription_id: Mapped[str] = mapped_column(ForeignKey("webhook_subscriptions.id"))
    event_id: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(64))
    aggregate_id: Mapped[str] = mapped_column(String(300))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    occurred_at: Mapped[datetime] = mapped_column(_tz())
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    dispatched_generation: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class WebhookDeliveryRow(Base):
    """One attempt to deliver an outbox row (write-once)."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    outbox_id: Mapped[str] = mapped_column(ForeignKey("outbox.id", ondelete="CASCADE"))
    subscription_id: Mapped[str] = mapped_column(ForeignKey("webhook_subscriptions.id"))
    webhook_id: Mapped[str] = mapped_column(String(100))
    event_type: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer)
    attempted_at: Mapped[datetime] = mapped_column(_tz())
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    latency_ms: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class DeadLetterRow(Base):
    """Something that needs a person: a delivery out of attempts, or an execution whose
    effect dead-lettered."""

    __tablename__ = "dead_letters"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    kind: Mapped[str] = mapped_column(String(16))
    subject_id: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    closed_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    closed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    requeued_as: Mapped[str | None] = mapped_column(String(64), nullable=True)


class CompensatingActionRow(Base):
    """What a dead-lettered run's manifest points at: what was attempted, what is known of
    the effect, what operators did."""

    __tablename__ = "compensating_actions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    receipt_id: Mapped[str] = mapped_column(String(64))
    dead_letter_id: Mapped[str] = mapped_column(ForeignKey("dead_letters.id"))
    attempted: Mapped[dict[str, Any]] = mapped_column(JSONB)
    effect: Mapped[str] = mapped_column(String(32), default="unknown")
    operator_actions: Mapped[list[dict[str, Any]]] = mapped_column(
        JSONB, server_default=text("'[]'")
    )
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class IdempotentHitRow(Base):
    """How often an execution's stored answer was replayed: one row per execution, its
    counter added to in batches (``store.hits``), never a row per replay."""

    __tablename__ = "idempotent_hits"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    receipt_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    capability_id: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str] = mapped_column(String(256))
    hits: Mapped[int] = mapped_column(BigInteger)
    first_hit_at: Mapped[datetime] = mapped_column(_tz())
    last_hit_at: Mapped[datetime] = mapped_column(_tz())


class TrustRollupRow(Base):
    """Outcome events of one tenant, capability version, kind of traffic and minute (or
    hour, or day), summed (``store.trust``); rebuilt whole whenever one of its events is new."""

    __tablename__ = "trust_rollup"
    __table_args__ = (
        Index("ix_trust_rollup_tenant_span_bucket", "tenant_id", "span_minutes", "bucket"),
    )

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    capability_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    capability_version: Mapped[str] = mapped_column(String(50), primary_key=True)
    is_synthetic: Mapped[bool] = mapped_column(Boolean, primary_key=True)
    # 1: a minute, summed from the raw events; 60: an hour, from its minutes; 1440: a day,
    # from its hours.
    span_minutes: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket: Mapped[datetime] = mapped_column(_tz(), primary_key=True)
    samples: Mapped[int] = mapped_column(Integer)
    successes: Mapped[int] = mapped_column(Integer)
    rate_limited: Mapped[int] = mapped_column(Integer)
    excluded: Mapped[int] = mapped_column(Integer)
    errors: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'"))
    latency_histogram: Mapped[dict[str, int]] = mapped_column(JSONB, server_default=text("'{}'"))
    last_success_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    last_failure_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)


class TrustRefreshRow(Base):
    """Up to when (``outcome_events.recorded_at``) a tenant's rollup has read."""

    __tablename__ = "trust_refresh"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    refreshed_at: Mapped[datetime] = mapped_column(_tz())


class ProbeRow(Base):
    """A synthetic probe: which capability, with which input, how often (a Temporal
    Schedule per probe runs it)."""

    __tablename__ = "probes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    capability_id: Mapped[str] = mapped_column(String(200))
    capability_version: Mapped[str | None] = mapped_column(String(50), nullable=True)
    input: Mapped[dict[str, Any]] = mapped_column(JSONB)
    connection_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    interval_seconds: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean, server_default=false())
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    # The key whose authority the probe's runs carry (its creator, or who last resumed
    # it) and that key's scopes; None: made before probes carried one (not run).
    api_key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    scopes: Mapped[list[str] | None] = mapped_column(ARRAY(Text), nullable=True)


class TenantQuotaRow(Base):
    """A tenant's own limit for one quota, set by an admin; without a row the quota's
    default (a setting) applies."""

    __tablename__ = "tenant_quotas"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    quota: Mapped[str] = mapped_column(String(32), primary_key=True)
    quota_limit: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class PlanRow(Base):
    """A plan: what it does (redacted), where each step stands, and its resumes. Step
    outputs are not here: each stays sealed with its execution (``execution_outputs``)."""

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    # None for a dry run: it never takes a key.
    idempotency_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    plan_hash: Mapped[str] = mapped_column(String(80))
    workflow_id: Mapped[str] = mapped_column(String(300))
    run_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    on_failure: Mapped[str] = mapped_column(String(16))
    document: Mapped[dict[str, Any]] = mapped_column(JSONB)
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    approval_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    resumes: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default=text("'[]'"))
    trace_id: Mapped[str] = mapped_column(String(64))
    requested_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class PersonRow(Base):
    """A tenant's person (``person:<handle>`` in approvals): the scopes the tenant gave
    them and how they are recognised (an OpenID Connect subject, a Slack user id)."""

    __tablename__ = "people"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    handle: Mapped[str] = mapped_column(String(64), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(200), server_default="")
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    oidc_issuer: Mapped[str | None] = mapped_column(String(500), nullable=True)
    oidc_subject: Mapped[str | None] = mapped_column(String(255), nullable=True)
    slack_user_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    disabled_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)


class ConsoleSessionRow(Base):
    """A browser's signed-in console session; only its secret's hash is kept."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    secret_hash: Mapped[str] = mapped_column(String(128))
    # ``key:<id>`` (signed in with an API key) or ``person:<handle>`` (OpenID Connect).
    actor: Mapped[str] = mapped_column(String(100))
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    via: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(_tz())
    revoked_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)


class ApprovalChannelRow(Base):
    """Where a tenant's new approvals are announced: a Slack channel through one of its
    Slack connections, and the Slack app's signing secret (sealed) for its buttons."""

    __tablename__ = "approval_channels"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    connection_id: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(200))
    signing_secret_kid: Mapped[str] = mapped_column(String(100))
    signing_secret_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    # The key whose authority the announcements carry (who configured the channel) and
    # that key's scopes then: they run with those, never more.
    api_key_id: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class ConnectionTokenRow(Base):
    """A connection's current short-lived access token (and refresh token), sealed; the row
    is the lock a refresh holds (``store.connection_tokens``)."""

    __tablename__ = "connection_tokens"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    connection_id: Mapped[str] = mapped_column(ForeignKey("connections.id"), primary_key=True)
    key_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    access_nonce: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    access_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    refresh_nonce: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    refresh_ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)
    generation: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    refreshed_at: Mapped[datetime | None] = mapped_column(_tz(), nullable=True)


class AlertRouteRow(Base):
    """Where a tenant's operations alerts are announced: a connection and its target (a Slack
    channel, a webhook), sent with the scopes and id of the key that configured it."""

    __tablename__ = "alert_routes"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    connection_id: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    api_key_id: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class LogLeafRow(Base):
    """One logged object of a tenant's transparency log: ``digest`` is the SHA-256 of its
    bytes (the leaf's data); ``leaf_index`` its position, set once by the sequencer."""

    __tablename__ = "log_leaves"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    ref_id: Mapped[str] = mapped_column(String(100))
    digest: Mapped[bytes] = mapped_column(LargeBinary)
    recorded_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
    leaf_index: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class LogNodeRow(Base):
    """The hash of a complete subtree of 2^level leaves starting at leaf idx * 2^level."""

    __tablename__ = "log_nodes"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    hash: Mapped[bytes] = mapped_column(LargeBinary)


class LogHeadRow(Base):
    """A tenant's sequenced tree: its size and root (the sequencer's lock)."""

    __tablename__ = "log_heads"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    root: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class LogCheckpointRow(Base):
    """A signed checkpoint of a tenant's log (a C2SP signed note)."""

    __tablename__ = "log_checkpoints"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    root: Mapped[bytes] = mapped_column(LargeBinary)
    note: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())


class LogCosignatureRow(Base):
    """A witness's cosignature line of one checkpoint."""

    __tablename__ = "log_cosignatures"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    witness: Mapped[str] = mapped_column(String(200), primary_key=True)
    line: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(_tz(), server_default=func.now())
