"""Event log (seed 001), the runs projection kept in step with it, and the manifest index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = """
-- Compliance tenants keep manifests 7 years and refuse their deletion (seed 003).
ALTER TABLE tenants ADD COLUMN retention_mode varchar(16) NOT NULL DEFAULT 'standard'
    CONSTRAINT ck_tenants_retention_mode CHECK (retention_mode IN ('standard', 'compliance'));

CREATE TABLE orchestration_events (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    event_type varchar(100) NOT NULL,
    aggregate_type varchar(50) NOT NULL,
    aggregate_id varchar(300) NOT NULL,
    event_data jsonb NOT NULL,
    correlation_id varchar(64) NOT NULL,
    causation_id varchar(64),
    actor varchar(100) NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    sequence_number bigint GENERATED ALWAYS AS IDENTITY
        CONSTRAINT uq_orchestration_events_sequence_number UNIQUE
);
CREATE INDEX ix_events_aggregate
    ON orchestration_events (tenant_id, aggregate_type, aggregate_id, sequence_number);
CREATE INDEX ix_events_correlation
    ON orchestration_events (tenant_id, correlation_id, sequence_number);
CREATE INDEX ix_events_type ON orchestration_events (tenant_id, event_type, occurred_at DESC);
CREATE INDEX ix_events_sequence ON orchestration_events (tenant_id, sequence_number);

CREATE TRIGGER orchestration_events_write_once BEFORE UPDATE OR DELETE ON orchestration_events
    FOR EACH ROW EXECUTE FUNCTION moat_reject_mutation();
CREATE TRIGGER orchestration_events_no_truncate BEFORE TRUNCATE ON orchestration_events
    FOR EACH STATEMENT EXECUTE FUNCTION moat_reject_mutation();

-- The state of each execution, derived from its events (rebuildable, so mutable).
CREATE TABLE runs (
    receipt_id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    workflow_id varchar(300) NOT NULL,
    run_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    status varchar(20) NOT NULL,
    total_steps integer NOT NULL DEFAULT 0,
    failed_steps integer NOT NULL DEFAULT 0,
    retries integer NOT NULL DEFAULT 0,
    replays integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL,
    completed_at timestamptz,
    last_sequence bigint NOT NULL
);
CREATE INDEX ix_runs_tenant_status ON runs (tenant_id, status);

CREATE TABLE manifests (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    run_id varchar(64) NOT NULL,
    path text NOT NULL,
    sha256 varchar(80) NOT NULL,
    kid varchar(100) NOT NULL,
    alg varchar(10) NOT NULL,
    replayed boolean NOT NULL,
    outcome varchar(20) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_manifests_tenant_run UNIQUE (tenant_id, run_id)
);
CREATE INDEX ix_manifests_receipt ON manifests (tenant_id, receipt_id);
CREATE INDEX ix_manifests_created ON manifests (created_at);

-- A manifest's index row is never changed; retention may remove it (recorded as events).
CREATE FUNCTION moat_reject_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is write-once: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER manifests_no_update BEFORE UPDATE ON manifests
    FOR EACH ROW EXECUTE FUNCTION moat_reject_update();

-- Compliance mode: a manifest younger than 7 years cannot be removed, by anyone.
CREATE FUNCTION moat_guard_compliance_manifest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.created_at > now() - interval '7 years' AND EXISTS (
        SELECT 1 FROM tenants WHERE id = OLD.tenant_id AND retention_mode = 'compliance')
    THEN
        RAISE EXCEPTION 'manifest % of a compliance tenant is kept 7 years: deletion refused',
            OLD.id USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER manifests_compliance_guard BEFORE DELETE ON manifests
    FOR EACH ROW EXECUTE FUNCTION moat_guard_compliance_manifest();
"""

DOWNGRADE = """
DROP TABLE manifests;
DROP FUNCTION moat_guard_compliance_manifest();
DROP FUNCTION moat_reject_update();
DROP TABLE runs;
DROP TABLE orchestration_events;
ALTER TABLE tenants DROP COLUMN retention_mode;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
