"""People, console sessions and approval channels: the doors people use.

- ``people``: a tenant's people (approvers and admins who are not keys), each named
  ``person:<handle>`` in approvals, with the scopes the tenant gave them, and how they are
  recognised: an OpenID Connect issuer and subject (console sign-in), a Slack user id
  (approvals in Slack).
- ``console_sessions``: a browser's signed-in session (``/console``), made from an API key
  or a person's OpenID Connect sign-in; only the hash of its secret is kept. Revoking one
  (signing out, or revoking the key it came from) is final.
- ``approval_channels``: where a tenant's new approvals are announced (a Slack channel,
  through one of its Slack connections), with the Slack app's signing secret sealed.

All three under row-level security like every tenant table; the application role may
read, insert and update (and delete an approval channel), never delete a person or a
session (a person is disabled, a session revoked).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
TENANT = "tenant_id = current_setting('moat.tenant_id', true)"


def _isolated(table: str, grants: str) -> str:
    return f"""
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {table} USING ({TENANT}) WITH CHECK ({TENANT});
GRANT {grants} ON {table} TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE people (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    handle varchar(64) NOT NULL,
    display_name varchar(200) NOT NULL DEFAULT '',
    scopes text[] NOT NULL DEFAULT '{}',
    oidc_issuer varchar(500),
    oidc_subject varchar(255),
    slack_user_id varchar(64),
    created_by varchar(100) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz,
    CONSTRAINT pk_people PRIMARY KEY (tenant_id, handle),
    CONSTRAINT ck_people_oidc_pair CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL))
);
CREATE UNIQUE INDEX uq_people_oidc ON people (tenant_id, oidc_issuer, oidc_subject)
    WHERE oidc_subject IS NOT NULL;
CREATE UNIQUE INDEX uq_people_slack ON people (tenant_id, slack_user_id)
    WHERE slack_user_id IS NOT NULL;

CREATE TABLE console_sessions (
    id varchar(64) NOT NULL,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    secret_hash varchar(128) NOT NULL,
    actor varchar(100) NOT NULL,
    key_id varchar(64),
    scopes text[] NOT NULL DEFAULT '{}',
    via varchar(16) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CONSTRAINT pk_console_sessions PRIMARY KEY (id)
);
CREATE INDEX ix_console_sessions_tenant_key ON console_sessions (tenant_id, key_id);

CREATE TABLE approval_channels (
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    kind varchar(16) NOT NULL,
    connection_id varchar(64) NOT NULL,
    channel varchar(200) NOT NULL,
    signing_secret_kid varchar(100) NOT NULL,
    signing_secret_sealed bytea NOT NULL,
    api_key_id varchar(64) NOT NULL,
    scopes text[] NOT NULL DEFAULT '{}',
    created_by varchar(100) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pk_approval_channels PRIMARY KEY (tenant_id)
);
"""
        + _isolated("people", "SELECT, INSERT, UPDATE")
        + _isolated("console_sessions", "SELECT, INSERT, UPDATE")
        + _isolated("approval_channels", "SELECT, INSERT, UPDATE, DELETE")
    )


def downgrade() -> None:
    op.execute("DROP TABLE approval_channels; DROP TABLE console_sessions; DROP TABLE people")
