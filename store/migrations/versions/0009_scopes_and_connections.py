"""API key scopes, and connections (a tenant's credentials, encrypted at rest).

- ``api_keys.scopes``: what a key may do (``execute:*`` for every key so far, and the
  default). ``moat_lookup_api_key`` returns them with the key's tenant; the app role reads
  them and sets them when it creates a key, never later.
- ``connections``: one credential of a tenant. The secret is stored only as AES-256-GCM
  ciphertext with its nonce and the id of the key that sealed it (``store.keyrings.connections``),
  beside a fingerprint and at most its last 4 characters. Under row-level security like
  every tenant table; the application role inserts and reads rows and updates only what a
  rotation, a re-encryption or a revocation changes, never deletes one (a revoked
  connection is kept for the record), and a revocation is final: a revoked row never
  changes again.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from alembic import op
from sqlalchemy import text

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
DEFINER_SCOPE = "moat.definer_scope"


def _schema() -> str:
    name: str = op.get_bind().execute(text("SELECT current_schema()")).scalar_one()
    return '"' + name.replace('"', '""') + '"'


def _lookup(schema: str, *, scopes: bool) -> str:
    scope_column = ", scopes text[]" if scopes else ""
    scope_value = ", k.scopes" if scopes else ""
    return f"""
DROP FUNCTION moat_lookup_api_key(text, text);
CREATE FUNCTION moat_lookup_api_key(p_key_id text, p_secret_hash text)
RETURNS TABLE (tenant_id text, revoked_at timestamptz, policy_mode text,
               idempotency_ttl_seconds integer{scope_column})
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
AS $$
DECLARE
    previous text := current_setting('{DEFINER_SCOPE}', true);
BEGIN
    PERFORM set_config('{DEFINER_SCOPE}', 'on', true);
    RETURN QUERY
        SELECT k.tenant_id::text, k.revoked_at, t.policy_mode::text,
               t.idempotency_ttl_seconds{scope_value}
        FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
        WHERE k.id = p_key_id AND k.secret_hash = p_secret_hash;
    PERFORM set_config('{DEFINER_SCOPE}', coalesce(previous, ''), true);
END;
$$;
REVOKE ALL ON FUNCTION moat_lookup_api_key(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_lookup_api_key(text, text) TO {APP_ROLE};
"""


SCOPES_UP = f"""
ALTER TABLE api_keys ADD COLUMN scopes text[] NOT NULL DEFAULT '{{execute:*}}';
GRANT SELECT (scopes) ON api_keys TO {APP_ROLE};
"""

TENANT = "tenant_id = current_setting('moat.tenant_id', true)"
SEALED = "ciphertext, nonce, key_id, fingerprint, last4"

CONNECTIONS_UP = f"""
CREATE TABLE connections (
    id varchar(64) PRIMARY KEY,
    tenant_id varchar(64) NOT NULL REFERENCES tenants (id),
    type varchar(32) NOT NULL,
    name varchar(200) NOT NULL,
    config jsonb NOT NULL DEFAULT '{{}}',
    ciphertext bytea NOT NULL,
    nonce bytea NOT NULL,
    key_id varchar(100) NOT NULL,
    fingerprint varchar(80) NOT NULL,
    last4 varchar(4) NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX ix_connections_tenant_created ON connections (tenant_id, created_at);
ALTER TABLE connections ENABLE ROW LEVEL SECURITY;
ALTER TABLE connections FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON connections USING ({TENANT}) WITH CHECK ({TENANT});
GRANT SELECT, INSERT ON connections TO {APP_ROLE};
GRANT UPDATE ({SEALED}, rotated_at, revoked_at) ON connections TO {APP_ROLE};

CREATE FUNCTION moat_connection_revocation_is_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.revoked_at IS NOT NULL THEN
        RAISE EXCEPTION 'connection % is revoked; a revocation is final', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER connections_revocation_is_final
    BEFORE UPDATE ON connections
    FOR EACH ROW EXECUTE FUNCTION moat_connection_revocation_is_final();
"""

CONNECTIONS_DOWN = """
DROP TABLE connections;
DROP FUNCTION moat_connection_revocation_is_final();
"""

SCOPES_DOWN = """
ALTER TABLE api_keys DROP COLUMN scopes;
"""


def upgrade() -> None:
    schema = _schema()
    op.execute(SCOPES_UP)
    op.execute(_lookup(schema, scopes=True))
    op.execute(CONNECTIONS_UP)


def downgrade() -> None:
    schema = _schema()
    op.execute(CONNECTIONS_DOWN)
    op.execute(_lookup(schema, scopes=False))
    op.execute(SCOPES_DOWN)
