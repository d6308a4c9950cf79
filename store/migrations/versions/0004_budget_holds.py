"""Budget holds: an allowed execution holds one unit of its budget until it records.

Before, the policy step compared ``used`` with the limit and the record step counted the
success, so executions with different keys that were checked while others were still in
flight could all pass: a limit of 5 let 20 concurrent executions through. Now the check
locks the budget row, counts ``used`` plus the live holds of the period, and inserts the
execution's hold in the same transaction; the record step removes it (and counts a
success) in the receipt's transaction. A run that ends without recording (terminated)
leaves its hold until ``expires_at``, set from the capability's longest possible run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"

UPGRADE = f"""
CREATE TABLE budget_holds (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    receipt_id varchar(64) NOT NULL,
    capability_id varchar(200) NOT NULL,
    period varchar(8) NOT NULL,
    period_start date NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, receipt_id)
);
CREATE INDEX ix_budget_holds_live
    ON budget_holds (tenant_id, capability_id, period, period_start, expires_at);

ALTER TABLE budget_holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget_holds FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON budget_holds USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE, DELETE ON budget_holds TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE budget_holds")
