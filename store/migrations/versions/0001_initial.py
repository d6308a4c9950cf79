"""Tenants, API keys, idempotency claims, receipts, outcome events, policy, budgets.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE tenants (
    id varchar(64) PRIMARY KEY,
    name varchar(200) NOT NULL CONSTRAINT uq_tenants_name UNIQUE,
    policy_mode varchar(16) NOT NULL DEFAULT 'standard'
        CONSTRAINT ck_tenants_policy_mode
        CHECK (policy_mode IN ('standard', 'strict', 'audit', 'bypass')),
    allow_bypass boolean NOT NULL DEFAULT false,
    idempotency_ttl_seconds integer NOT NULL DEFAULT 86400
        CONSTRAINT ck_tenants_ttl CHECK (idempotency_ttl_seconds >= 60),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    secret_hash varchar(128) NOT NULL,
    name varchar(200) NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX ix_api_keys_tenant_id ON api_keys (tenant_id);

CREATE TABLE idempotency_keys (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    idempotency_key varchar(256) NOT NULL,
    receipt_id varchar(64) NOT NULL,
    input_hash varchar(80) NOT NULL,
    workflow_id varchar(300) NOT NULL,
    first_seen_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT pk_idempotency_keys PRIMARY KEY (tenant_id, idempotency_key)
);
CREATE INDEX ix_idempotency_keys_receipt ON idempotency_keys (tenant_id, receipt_id);

CREATE TABLE receipts (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    capability_id varchar(200) NOT NULL,
    capability_version varchar(50) NOT NULL,
    adapter_id varchar(100) NOT NULL,
    connection_id varchar(200) NOT NULL,
    request_id varchar(64) NOT NULL,
    "timestamp" timestamptz NOT NULL,
    latency_ms integer NOT NULL CONSTRAINT ck_receipts_latency CHECK (latency_ms >= 0),
    idempotency_key varchar(256) NOT NULL,
    input_hash varchar(80) NOT NULL,
    output_hash varchar(80),
    status varchar(20) NOT NULL CONSTRAINT ck_receipts_status CHECK (
        status IN ('success', 'failure', 'timeout', 'policy_denied', 'idempotent_hit')),
    error_code varchar(64),
    http_status integer,
    policy_decision_id varchar(64) NOT NULL,
    is_synthetic boolean NOT NULL DEFAULT false,
    workflow_id varchar(300) NOT NULL,
    run_id varchar(64) NOT NULL,
    trace_id varchar(64) NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_receipts_tenant_key ON receipts (tenant_id, idempotency_key, "timestamp");
CREATE INDEX ix_receipts_tenant_time ON receipts (tenant_id, "timestamp");

CREATE TABLE outcome_events (
    id varchar(64) NOT NULL,
    "timestamp" timestamptz NOT NULL,
    receipt_id varchar(64) NOT NULL,
    tenant_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    capability_version varchar(50) NOT NULL,
    adapter_id varchar(100) NOT NULL,
    success boolean NOT NULL,
    latency_ms integer NOT NULL,
    error_taxonomy varchar(40) NOT NULL,
    http_status integer,
    is_synthetic boolean NOT NULL DEFAULT false,
    CONSTRAINT pk_outcome_events PRIMARY KEY (id, "timestamp")
) PARTITION BY RANGE ("timestamp");
CREATE INDEX ix_outcome_events_capability_time
    ON outcome_events (capability_id, capability_version, "timestamp");
CREATE INDEX ix_outcome_events_tenant_time ON outcome_events (tenant_id, "timestamp");
CREATE TABLE outcome_events_default PARTITION OF outcome_events DEFAULT;

-- Creates the monthly partitions from the month of `start_at` on, `months` of them.
CREATE FUNCTION moat_ensure_outcome_partitions(start_at timestamptz, months integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    first_month date := date_trunc('month', start_at AT TIME ZONE 'UTC')::date;
    lower_bound date;
    name text;
BEGIN
    FOR i IN 0 .. months - 1 LOOP
        lower_bound := (first_month + make_interval(months => i))::date;
        name := format('outcome_events_%s', to_char(lower_bound, 'YYYY_MM'));
        IF to_regclass(name) IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM outcome_events_default
               WHERE "timestamp" >= (lower_bound::timestamp AT TIME ZONE 'UTC')
                 AND "timestamp" < ((lower_bound + interval '1 month')::timestamp
                                    AT TIME ZONE 'UTC'))
        THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF outcome_events FOR VALUES FROM (%L) TO (%L)',
                name,
                (lower_bound::timestamp AT TIME ZONE 'UTC'),
                ((lower_bound + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        END IF;
    END LOOP;
END;
$$;
SELECT moat_ensure_outcome_partitions(now(), 3);

CREATE TABLE policy_decisions (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    idempotency_key varchar(256) NOT NULL,
    mode varchar(16) NOT NULL,
    decision varchar(16) NOT NULL,
    rule_hit varchar(32) NOT NULL,
    reason text NOT NULL DEFAULT '',
    is_synthetic boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_policy_decisions_receipt_id ON policy_decisions (receipt_id);
CREATE INDEX ix_policy_decisions_tenant_time ON policy_decisions (tenant_id, created_at);

CREATE TABLE budgets (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    capability_id varchar(200) NOT NULL,
    "limit" bigint NOT NULL CONSTRAINT ck_budgets_limit CHECK ("limit" >= 0),
    period varchar(8) NOT NULL CONSTRAINT ck_budgets_period CHECK (period IN ('day', 'month')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_budgets PRIMARY KEY (tenant_id, capability_id)
);

CREATE TABLE budget_usage (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    capability_id varchar(200) NOT NULL,
    period varchar(8) NOT NULL,
    period_start date NOT NULL,
    used bigint NOT NULL DEFAULT 0,
    CONSTRAINT pk_budget_usage PRIMARY KEY (tenant_id, capability_id, period, period_start)
);

-- Write-once records: the database itself refuses to change or remove them.
CREATE FUNCTION moat_reject_mutation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is write-once: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER receipts_write_once BEFORE UPDATE OR DELETE ON receipts
    FOR EACH ROW EXECUTE FUNCTION moat_reject_mutation();
CREATE TRIGGER receipts_no_truncate BEFORE TRUNCATE ON receipts
    FOR EACH STATEMENT EXECUTE FUNCTION moat_reject_mutation();
CREATE TRIGGER outcome_events_write_once BEFORE UPDATE OR DELETE ON outcome_events
    FOR EACH ROW EXECUTE FUNCTION moat_reject_mutation();
CREATE TRIGGER outcome_events_no_truncate BEFORE TRUNCATE ON outcome_events
    FOR EACH STATEMENT EXECUTE FUNCTION moat_reject_mutation();
CREATE TRIGGER policy_decisions_write_once BEFORE UPDATE OR DELETE ON policy_decisions
    FOR EACH ROW EXECUTE FUNCTION moat_reject_mutation();
"""

DOWNGRADE = """
DROP TABLE budget_usage;
DROP TABLE budgets;
DROP TABLE policy_decisions;
DROP TABLE outcome_events;
DROP FUNCTION moat_ensure_outcome_partitions(timestamptz, integer);
DROP TABLE receipts;
DROP TABLE idempotency_keys;
DROP TABLE api_keys;
DROP TABLE tenants;
DROP FUNCTION moat_reject_mutation();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
