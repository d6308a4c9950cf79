"""Per-tenant allow-list of non-public hosts ``http.request`` may call (``host[:port]``).

The list opens a path into private networks, so only the owner role (operators: the CLI,
and the admin API when its gateway is given the owner's URL) may set it. The application
role keeps INSERT and UPDATE on every other column of ``tenants`` (the admin API creates
tenants with it), but not on this one: a new tenant's list is the empty default.
Column privileges do not narrow a table-wide grant, so the table-wide INSERT and UPDATE
from the row-level security revision are replaced by per-column ones.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
# Every column of tenants but http_allow_hosts.
APP_WRITABLE = (
    "id, name, policy_mode, allow_bypass, idempotency_ttl_seconds, retention_mode, created_at"
)

UPGRADE = f"""
ALTER TABLE tenants ADD COLUMN http_allow_hosts text[] NOT NULL DEFAULT '{{}}';
REVOKE INSERT, UPDATE ON tenants FROM {APP_ROLE};
GRANT INSERT ({APP_WRITABLE}) ON tenants TO {APP_ROLE};
GRANT UPDATE ({APP_WRITABLE}) ON tenants TO {APP_ROLE};
"""

# Revoking the table-wide privilege takes the column privileges with it.
DOWNGRADE = f"""
REVOKE INSERT, UPDATE ON tenants FROM {APP_ROLE};
GRANT INSERT, UPDATE ON tenants TO {APP_ROLE};
ALTER TABLE tenants DROP COLUMN http_allow_hosts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
