"""Idempotent hits, aggregated per execution: how often a stored answer was replayed, first
and last time. Replaces the permanent ``policy_decisions`` row each replay used to commit
(write amplification any tenant could trigger by repeating a request): gateways count hits
in memory and add them here in batches, one row per execution.

Under row-level security like every tenant table (ENABLE and FORCE, the tenant policy);
the application role may read, insert and update (the counters), never delete.

Revision ID: 0013
Revises: 0008
Create Date: 2026-11-26
"""

from alembic import op

revision = "0013"
down_revision = "0008"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

UPGRADE = f"""
CREATE TABLE idempotent_hits (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    idempotency_key varchar(256) NOT NULL,
    hits bigint NOT NULL CHECK (hits > 0),
    first_hit_at timestamptz NOT NULL,
    last_hit_at timestamptz NOT NULL,
    CONSTRAINT pk_idempotent_hits PRIMARY KEY (tenant_id, receipt_id)
);
ALTER TABLE idempotent_hits ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotent_hits FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotent_hits USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE ON idempotent_hits TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE idempotent_hits")
