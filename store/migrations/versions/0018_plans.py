"""Plans: several tool calls as one durable run (``POST /v1/plans``).

One row per plan: its key (none for a dry run, which never takes one), the digest of what
it does, its redacted document, where each step stands (``steps``: receipt ids, statuses,
errors; never an output, which stays sealed with its execution), and the operators'
resumes. Under row-level security like every tenant table; the application role may read,
insert and update, never delete.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE plans (
    id varchar(64) NOT NULL,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    idempotency_key varchar(256),
    plan_hash varchar(80) NOT NULL,
    workflow_id varchar(300) NOT NULL,
    run_id varchar(64) NOT NULL,
    status varchar(16) NOT NULL,
    on_failure varchar(16) NOT NULL,
    document jsonb NOT NULL,
    steps jsonb NOT NULL,
    error jsonb,
    approval_id varchar(64),
    resumes jsonb NOT NULL DEFAULT '[]',
    trace_id varchar(64) NOT NULL,
    requested_by varchar(100) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_plans PRIMARY KEY (id)
);
CREATE UNIQUE INDEX uq_plans_tenant_key ON plans (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX ix_plans_tenant_created ON plans (tenant_id, created_at);
ALTER TABLE plans ENABLE ROW LEVEL SECURITY;
ALTER TABLE plans FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON plans USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE ON plans TO {APP_ROLE};
"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE plans")
