"""Provider holds: when a provider said (``429``/``503`` with ``Retry-After``) not to call
again before a time, for one tenant's connection.

Every worker reads the hold before calling the provider through that connection, so one
worker's refusal holds back the calls of all of them; keyed by tenant and connection, so a
tenant's hold never delays another tenant's calls to the same provider. One row per
(tenant, connection), overwritten in place. Under row-level security like every tenant
table; the application role may read, insert and update, never delete.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE provider_holds (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    connection_id varchar(200) NOT NULL,
    held_until timestamptz NOT NULL,
    CONSTRAINT pk_provider_holds PRIMARY KEY (tenant_id, connection_id)
);
ALTER TABLE provider_holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE provider_holds FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON provider_holds USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE ON provider_holds TO {APP_ROLE};
"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE provider_holds")
