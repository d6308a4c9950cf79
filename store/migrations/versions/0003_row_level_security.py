"""Row-level security: the application role sees and writes only the rows of the tenant
its transaction names, on every table that holds tenant rows.

- ``moat_app`` (LOGIN, not superuser, NOBYPASSRLS, not the owner) is what the gateway and
  worker connect as; migrations run as the owner, who keeps the tables.
- Every tenant table: ENABLE and FORCE row level security (so the owner is held too, unless
  a superuser), one policy ``tenant_id = current_setting('moat.tenant_id', true)``. Unset,
  the setting is NULL or '' and matches nothing: a query that forgets its tenant, or a
  transaction that forgets ``set_config('moat.tenant_id', …, true)``, sees no rows.
- The two questions asked before a tenant is known go through SECURITY DEFINER functions
  with a pinned search_path: ``moat_lookup_api_key(key_id)`` (authentication) and
  ``moat_list_tenants()`` (the operators' tenant directory). They read through a SELECT
  policy for the owner that is open only while such a function runs (it sets
  ``moat.definer_scope`` on and back), so they work for an owner that is not a superuser
  as well; the app role may set that setting too, but the policy is not for it.
- Write-once tables (receipts, outcome events, policy decisions, orchestration events) are
  granted SELECT and INSERT only; their triggers refuse changes from anyone anyway.
- Partitions of ``outcome_events`` get no grants: the app role reaches them only through
  the parent and its policy. ``moat_ensure_outcome_partitions`` becomes SECURITY DEFINER so
  the app role can have next months' partitions created without owning the table.

A table that holds tenant rows and is added later needs the same treatment in its own
revision (``tests/test_rls.py`` checks every table with a ``tenant_id`` column).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from alembic import op
from sqlalchemy import text

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

APP_ROLE = "moat_app"
SETTING = "moat.tenant_id"
DEFINER_SCOPE = "moat.definer_scope"

# Table -> the column naming its tenant.
TENANT_TABLES = {
    "tenants": "id",
    "api_keys": "tenant_id",
    "idempotency_keys": "tenant_id",
    "receipts": "tenant_id",
    "outcome_events": "tenant_id",
    "policy_decisions": "tenant_id",
    "budgets": "tenant_id",
    "budget_usage": "tenant_id",
    "orchestration_events": "tenant_id",
    "runs": "tenant_id",
    "manifests": "tenant_id",
}
WRITE_ONCE = {"receipts", "outcome_events", "policy_decisions", "orchestration_events"}
# Read before any tenant is known, by the SECURITY DEFINER functions only.
DEFINER_READ = ("tenants", "api_keys")

ROLE = f"""
DO $$
BEGIN
    IF current_user = '{APP_ROLE}' THEN
        RAISE EXCEPTION 'migrations run as the owner role, not as {APP_ROLE}';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
        CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles
               WHERE rolname = '{APP_ROLE}' AND (rolsuper OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role {APP_ROLE} must be neither superuser nor BYPASSRLS';
    END IF;
    IF pg_has_role('{APP_ROLE}', current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'role {APP_ROLE} must not be a member of the owner role %', current_user;
    END IF;
END
$$;
"""


def _functions(schema: str) -> str:
    path = f"pg_catalog, {schema}, pg_temp"
    # The definer scope is opened and closed inside the body (a non-superuser owner may not
    # put a custom setting in a function's SET clause); on an error the transaction or
    # savepoint that is rolled back takes the setting with it.
    scope_on = f"PERFORM set_config('{DEFINER_SCOPE}', 'on', true);"
    scope_off = f"PERFORM set_config('{DEFINER_SCOPE}', coalesce(previous, ''), true);"
    previous = f"previous text := current_setting('{DEFINER_SCOPE}', true);"
    return f"""
CREATE FUNCTION moat_lookup_api_key(p_key_id text)
RETURNS TABLE (
    tenant_id text,
    secret_hash text,
    revoked_at timestamptz,
    policy_mode text,
    idempotency_ttl_seconds integer
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = {path}
AS $$
DECLARE
    {previous}
BEGIN
    {scope_on}
    RETURN QUERY
        SELECT k.tenant_id::text, k.secret_hash::text, k.revoked_at, t.policy_mode::text,
               t.idempotency_ttl_seconds
        FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
        WHERE k.id = p_key_id;
    {scope_off}
END;
$$;
REVOKE ALL ON FUNCTION moat_lookup_api_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_lookup_api_key(text) TO {APP_ROLE};

CREATE FUNCTION moat_list_tenants()
RETURNS SETOF tenants
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = {path}
AS $$
DECLARE
    {previous}
BEGIN
    {scope_on}
    RETURN QUERY SELECT * FROM tenants ORDER BY created_at, id;
    {scope_off}
END;
$$;
REVOKE ALL ON FUNCTION moat_list_tenants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_list_tenants() TO {APP_ROLE};

ALTER FUNCTION moat_ensure_outcome_partitions(timestamptz, integer)
    SECURITY DEFINER SET search_path = {path};
REVOKE ALL ON FUNCTION moat_ensure_outcome_partitions(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION moat_ensure_outcome_partitions(timestamptz, integer) TO {APP_ROLE};
"""


def _table(table: str, column: str) -> str:
    tenant = f"{column} = current_setting('{SETTING}', true)"
    privileges = "SELECT, INSERT" if table in WRITE_ONCE else "SELECT, INSERT, UPDATE, DELETE"
    sql = f"""
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {table} USING ({tenant}) WITH CHECK ({tenant});
GRANT {privileges} ON {table} TO {APP_ROLE};
"""
    if table in DEFINER_READ:
        sql += f"""
CREATE POLICY definer_lookup ON {table} FOR SELECT TO CURRENT_USER
    USING (current_setting('{DEFINER_SCOPE}', true) = 'on');
"""
    return sql


def _schema() -> str:
    """The schema the tables live in, as a quoted identifier."""
    name: str = op.get_bind().execute(text("SELECT current_schema()")).scalar_one()
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    schema = _schema()
    op.execute(ROLE)
    op.execute(f"GRANT USAGE ON SCHEMA {schema} TO {APP_ROLE}")
    op.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {APP_ROLE}")
    for table, column in TENANT_TABLES.items():
        op.execute(_table(table, column))
    op.execute(_functions(schema))


def downgrade() -> None:
    """Drops the policies, grants and functions; the role stays (roles are cluster-wide and
    may serve other databases)."""
    schema = _schema()
    op.execute(
        f"""
DROP FUNCTION moat_list_tenants();
DROP FUNCTION moat_lookup_api_key(text);
ALTER FUNCTION moat_ensure_outcome_partitions(timestamptz, integer)
    SECURITY INVOKER RESET search_path;
GRANT EXECUTE ON FUNCTION moat_ensure_outcome_partitions(timestamptz, integer) TO PUBLIC;
REVOKE EXECUTE ON FUNCTION moat_ensure_outcome_partitions(timestamptz, integer)
    FROM {APP_ROLE};
REVOKE USAGE ON ALL SEQUENCES IN SCHEMA {schema} FROM {APP_ROLE};
REVOKE USAGE ON SCHEMA {schema} FROM {APP_ROLE};
"""
    )
    for table in TENANT_TABLES:
        op.execute(
            f"""
DROP POLICY IF EXISTS definer_lookup ON {table};
DROP POLICY tenant_isolation ON {table};
ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;
ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON {table} FROM {APP_ROLE};
"""
        )
