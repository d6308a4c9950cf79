"""Execution outputs: the redacted output of an execution, sealed with the payload codec's
keys, kept for its idempotency window so a replay answers the same output from Postgres.

Under row-level security like every tenant table (ENABLE and FORCE, the tenant policy);
the application role may insert, read and delete (retention) rows, never update them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

UPGRADE = f"""
CREATE TABLE execution_outputs (
    receipt_id varchar(64) PRIMARY KEY REFERENCES receipts (id),
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    key_id varchar(100) NOT NULL,
    sealed bytea NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_execution_outputs_tenant_expiry ON execution_outputs (tenant_id, expires_at);
ALTER TABLE execution_outputs ENABLE ROW LEVEL SECURITY;
ALTER TABLE execution_outputs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON execution_outputs USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, DELETE ON execution_outputs TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE execution_outputs")
