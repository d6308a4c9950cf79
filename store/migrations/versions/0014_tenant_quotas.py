"""Per-tenant quotas: an admin's own limit for a tenant, one row per quota.

Without a row a quota's default (a ``MOAT_QUOTA_*`` setting) applies. Under row-level
security like every tenant table (ENABLE and FORCE, the tenant policy); the application
role reads and writes them, because the admin API that sets them runs as that role, scoped
to the tenant it names.

The pending-approvals quota counts, besides the approvals pending, the calls the policy
step sent to wait whose approval row is not written yet: a partial index finds a tenant's
recent such decisions without reading its others.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

UPGRADE = f"""
CREATE TABLE tenant_quotas (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    quota varchar(32) NOT NULL,
    quota_limit integer NOT NULL CHECK (quota_limit >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_tenant_quotas PRIMARY KEY (tenant_id, quota)
);
ALTER TABLE tenant_quotas ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_quotas FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_quotas USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_quotas TO {APP_ROLE};
CREATE INDEX ix_policy_decisions_awaiting_approval ON policy_decisions (tenant_id, created_at)
    WHERE rule_hit = 'APPROVAL_REQUIRED';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP INDEX ix_policy_decisions_awaiting_approval")
    op.execute("DROP TABLE tenant_quotas")
