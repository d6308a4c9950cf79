"""Connection tokens: a connection's current short-lived access token (and, for OAuth 2, its
refresh token), sealed like any connection secret, refreshed once across every worker and
gateway; and the state of a connection that needs a person to connect it again.

- ``connection_tokens``: one row per connection holding a minted or refreshed token pair
  (``store.connection_tokens``). The row is the lock of a refresh: the process that
  refreshes holds it (``SELECT … FOR UPDATE``) while it asks the provider, writes the new
  pair in the same transaction, and every other caller waits for that commit and reads it.
  ``generation`` counts the refreshes, so a caller that saw a token refused refreshes only
  if no one has since.
- ``connections.needs_reauth_at`` / ``needs_reauth_reason``: set when the provider refuses
  the grant for good (``invalid_grant``): calls are refused with ``connection_needs_reauth``
  instead of failing one by one, until the connection is connected again.
- ``alert_routes``: where a tenant's operations alerts (a dead letter, an execution ended
  ``outcome_unknown``, a connection needing a person) are announced, through one of its
  connections, with the scopes and id of the key that configured it.

Under row-level security like every tenant table; the application role may read, insert
and update tokens (a revoked connection's row stays, never used again), never delete.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE connection_tokens (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    connection_id varchar(64) NOT NULL REFERENCES connections (id),
    key_id varchar(100),
    access_nonce bytea,
    access_ciphertext bytea,
    refresh_nonce bytea,
    refresh_ciphertext bytea,
    expires_at timestamptz,
    generation integer NOT NULL DEFAULT 0,
    refreshed_at timestamptz,
    CONSTRAINT pk_connection_tokens PRIMARY KEY (tenant_id, connection_id)
);
ALTER TABLE connection_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE connection_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON connection_tokens USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE ON connection_tokens TO {APP_ROLE};

CREATE TABLE alert_routes (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    connection_id varchar(64) NOT NULL,
    target text NOT NULL,
    api_key_id varchar(64) NOT NULL,
    scopes text[] NOT NULL DEFAULT '{{}}',
    created_by varchar(100) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_alert_routes PRIMARY KEY (tenant_id)
);
ALTER TABLE alert_routes ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_routes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON alert_routes USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_routes TO {APP_ROLE};

ALTER TABLE connections ADD COLUMN needs_reauth_at timestamptz;
ALTER TABLE connections ADD COLUMN needs_reauth_reason varchar(200);
GRANT UPDATE (needs_reauth_at, needs_reauth_reason) ON connections TO {APP_ROLE};
"""
    )


def downgrade() -> None:
    op.execute(
        """
DROP TABLE alert_routes;
DROP TABLE connection_tokens;
ALTER TABLE connections DROP COLUMN needs_reauth_reason;
ALTER TABLE connections DROP COLUMN needs_reauth_at;
"""
    )
