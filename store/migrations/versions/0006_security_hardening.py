"""The application role no longer reads API key hashes, nor sets a tenant's privileges.

- ``moat_lookup_api_key(key_id, secret_hash)`` replaces ``moat_lookup_api_key(key_id)``:
  the caller passes the hash of the secret it was shown, and gets the key's tenant,
  revocation time, policy mode and TTL only when the stored hash is that one; the hash is
  never returned. The comparison is ``=`` on SHA-256 hex digests of one fixed length: its
  timing can at most tell how much of the stored digest a guess's digest shares, and that
  does not help find a secret hashing to it (a preimage), so no constant-time compare or
  extension is needed.
- ``moat_api_key_tenant(key_id)``: the tenant of a key id and nothing else, for revocation
  by key id (the admin path), asked before any tenant is known.
- Column privileges: on ``api_keys`` the app role reads every column but ``secret_hash``,
  inserts keys, and updates ``revoked_at`` only; on ``tenants`` it creates tenants without
  choosing ``allow_bypass`` (the column default, false, applies) and updates or deletes
  nothing, so ``allow_bypass``, ``policy_mode`` and ``retention_mode`` change only through
  the owner role.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from alembic import op
from sqlalchemy import text

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
DEFINER_SCOPE = "moat.definer_scope"
KEY_COLUMNS = "id, tenant_id, name, created_at, revoked_at"
TENANT_INSERT_COLUMNS = "id, name, policy_mode, idempotency_ttl_seconds, retention_mode, created_at"
# What the previous revision let the app role write: every column but http_allow_hosts.
TENANT_PREVIOUS_COLUMNS = (
    "id, name, policy_mode, allow_bypass, idempotency_ttl_seconds, retention_mode, created_at"
)

PREVIOUS = f"previous text := current_setting('{DEFINER_SCOPE}', true);"
SCOPE_ON = f"PERFORM set_config('{DEFINER_SCOPE}', 'on', true);"
SCOPE_OFF = f"PERFORM set_config('{DEFINER_SCOPE}', coalesce(previous, ''), true);"


def _schema() -> str:
    name: str = op.get_bind().execute(text("SELECT current_schema()")).scalar_one()
    return '"' + name.replace('"', '""') + '"'


def _definer(signature: str, returns: str, body: str, schema: str, result: str = "") -> str:
    declare = f"result {result};" if result else ""
    finish = "RETURN result;" if result else ""
    return f"""
CREATE FUNCTION {signature}
RETURNS {returns}
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
AS $$
DECLARE
    {PREVIOUS}
    {declare}
BEGIN
    {SCOPE_ON}
    {body}
    {SCOPE_OFF}
    {finish}
END;
$$;
"""


def _upgrade_sql(schema: str) -> str:
    lookup = _definer(
        "moat_lookup_api_key(p_key_id text, p_secret_hash text)",
        "TABLE (tenant_id text, revoked_at timestamptz, policy_mode text,"
        " idempotency_ttl_seconds integer)",
        """RETURN QUERY
        SELECT k.tenant_id::text, k.revoked_at, t.policy_mode::text,
               t.idempotency_ttl_seconds
        FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
        WHERE k.id = p_key_id AND k.secret_hash = p_secret_hash;""",
        schema,
    )
    tenant = _definer(
        "moat_api_key_tenant(p_key_id text)",
        "text",
        "SELECT k.tenant_id INTO result FROM api_keys k WHERE k.id = p_key_id;",
        schema,
        result="text",
    )
    return f"""
DROP FUNCTION moat_lookup_api_key(text);
{lookup}
REVOKE ALL ON FUNCTION moat_lookup_api_key(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_lookup_api_key(text, text) TO {APP_ROLE};
{tenant}
REVOKE ALL ON FUNCTION moat_api_key_tenant(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_api_key_tenant(text) TO {APP_ROLE};

REVOKE ALL ON api_keys FROM {APP_ROLE};
GRANT SELECT ({KEY_COLUMNS}) ON api_keys TO {APP_ROLE};
GRANT INSERT ON api_keys TO {APP_ROLE};
GRANT UPDATE (revoked_at) ON api_keys TO {APP_ROLE};

REVOKE ALL ON tenants FROM {APP_ROLE};
GRANT SELECT ON tenants TO {APP_ROLE};
GRANT INSERT ({TENANT_INSERT_COLUMNS}) ON tenants TO {APP_ROLE};
"""


def _downgrade_sql(schema: str) -> str:
    lookup = _definer(
        "moat_lookup_api_key(p_key_id text)",
        "TABLE (tenant_id text, secret_hash text, revoked_at timestamptz, policy_mode text,"
        " idempotency_ttl_seconds integer)",
        """RETURN QUERY
        SELECT k.tenant_id::text, k.secret_hash::text, k.revoked_at, t.policy_mode::text,
               t.idempotency_ttl_seconds
        FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
        WHERE k.id = p_key_id;""",
        schema,
    )
    return f"""
DROP FUNCTION moat_api_key_tenant(text);
DROP FUNCTION moat_lookup_api_key(text, text);
{lookup}
REVOKE ALL ON FUNCTION moat_lookup_api_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_lookup_api_key(text) TO {APP_ROLE};

REVOKE ALL ON api_keys FROM {APP_ROLE};
GRANT SELECT, INSERT, UPDATE, DELETE ON api_keys TO {APP_ROLE};
REVOKE ALL ON tenants FROM {APP_ROLE};
GRANT SELECT, DELETE ON tenants TO {APP_ROLE};
GRANT INSERT ({TENANT_PREVIOUS_COLUMNS}) ON tenants TO {APP_ROLE};
GRANT UPDATE ({TENANT_PREVIOUS_COLUMNS}) ON tenants TO {APP_ROLE};
"""


def upgrade() -> None:
    op.execute(_upgrade_sql(_schema()))


def downgrade() -> None:
    op.execute(_downgrade_sql(_schema()))
