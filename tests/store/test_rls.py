"""Tenant isolation in the database itself: row-level security on every tenant table, for
the application role the gateway and worker use (and for a non-superuser owner)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from psycopg import sql
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.settings import APP_DATABASE_ROLE, MoatSettings
from store import api_keys, budgets, make_engine, make_sessionmaker, tenancy, tenants, upgrade
from store.db import MIGRATIONS
from tests.support.stack import Stack

TENANT_COLUMN = """
SELECT c.relname, a.attname
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND (a.attname = 'tenant_id' OR (c.relname = 'tenants' AND a.attname = 'id'))
ORDER BY c.relname
"""


async def tenant_tables(session: AsyncSession) -> dict[str, str]:
    rows = (await session.execute(text(TENANT_COLUMN))).all()
    return {table: column for table, column in rows}


async def test_every_tenant_table_is_forced_under_a_policy(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions() as s:
        tables = await tenant_tables(s)
        assert {"tenants", "api_keys", "receipts", "outcome_events", "runs"} <= set(tables)
        for table, column in tables.items():
            enabled, forced, owner = (
                await s.execute(
                    text(
                        "SELECT relrowsecurity, relforcerowsecurity, pg_get_userbyid(relowner)"
                        " FROM pg_class WHERE oid = CAST(:t AS regclass)"
                    ),
                    {"t": table},
                )
            ).one()
            assert enabled and forced, table
            assert owner != APP_DATABASE_ROLE, table
            policies = (
                await s.execute(
                    text("SELECT qual, with_check FROM pg_policies WHERE tablename = :t"),
                    {"t": table},
                )
            ).all()
            isolation = [p for p in policies if column in p.qual and "moat.tenant_id" in p.qual]
            assert isolation and isolation[0].with_check, (table, policies)
        role = (
            await s.execute(
                text("SELECT rolsuper, rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = :r"),
                {"r": APP_DATABASE_ROLE},
            )
        ).one()
        assert role == (False, False, True)


async def seed_two_tenants(stack: Stack) -> tuple[str, str]:
    """Tenant A (the stack's) with an execution and a budget; tenant B with one of its own."""
    a = stack.tenant_id
    response = await stack.execute("demo.echo", {"owner": "a"}, key="a-1")
    assert response.status_code == 200, response.text
    async with stack.sessions.begin() as s:
        await budgets.set_budget(s, a, "demo.echo", 100, "day")
    b, b_key = await stack.new_tenant()
    response = await stack.execute("demo.echo", {"owner": "b"}, key="b-1", api_key=b_key)
    assert response.status_code == 200, response.text
    return a, b


async def test_unfiltered_queries_as_the_app_role_see_one_tenant(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    a, b = await seed_two_tenants(stack)
    async with stack.sessions() as s:
        tables = await tenant_tables(s)
        # The owner (a superuser here) sees A's rows: there is something to hide.
        for table in ("receipts", "outcome_events", "policy_decisions", "orchestration_events"):
            column = tables[table]
            count = (
                await s.execute(text(f"SELECT count(*) FROM {table} WHERE {column} = :a"), {"a": a})
            ).scalar_one()
            assert count > 0, table

    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, b)
        for table, column in tables.items():
            # Deliberately no tenant filter.
            rows = (await s.execute(text(f"SELECT {column} FROM {table}"))).scalars().all()
            assert a not in rows, table
            assert set(rows) <= {b}, table
        own = (await s.execute(text("SELECT count(*) FROM receipts"))).scalar_one()
        assert own == 1
        # Through the ORM helpers too, even when asked for A's records by id.
        assert await tenants.get_tenant(s, a) is None
        assert await api_keys.list_api_keys(s, a) == []

    # No tenant named: nothing at all.
    async with app_sessions.begin() as s:
        for table in tables:
            count = (await s.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            assert count == 0, table


async def test_the_app_role_cannot_write_into_another_tenant(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    a, b = await seed_two_tenants(stack)
    async with app_sessions() as s:
        await tenancy.set_tenant(s, b)
        with pytest.raises(DBAPIError, match="row-level security"):
            await budgets.set_budget(s, a, "demo.echo", 1, "day")
        await s.rollback()
        await tenancy.set_tenant(s, b)
        updated = await s.execute(
            text('UPDATE budgets SET "limit" = 0 WHERE tenant_id = :a'), {"a": a}
        )
        assert updated.rowcount == 0  # type: ignore[attr-defined]
        await s.rollback()
    async with stack.sessions() as s:
        limit = (
            await s.execute(text('SELECT "limit" FROM budgets WHERE tenant_id = :a'), {"a": a})
        ).scalar_one()
    assert limit == 100


async def test_write_once_tables_are_insert_only_for_the_app_role(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    await stack.execute("demo.echo", {"x": 1})
    async with app_sessions() as s:
        for table in ("receipts", "outcome_events", "policy_decisions", "orchestration_events"):
            await tenancy.set_tenant(s, stack.tenant_id)
            with pytest.raises(ProgrammingError, match="permission denied"):
                await s.execute(text(f"DELETE FROM {table}"))
            await s.rollback()


async def test_partitions_are_reached_only_through_the_parent(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with stack.sessions() as s:
        partitions = (
            (
                await s.execute(
                    text(
                        "SELECT inhrelid::regclass::text FROM pg_inherits"
                        " WHERE inhparent = 'outcome_events'::regclass"
                    )
                )
            )
            .scalars()
            .all()
        )
    assert "outcome_events_default" in partitions
    async with app_sessions() as s:
        for partition in partitions:
            with pytest.raises(ProgrammingError, match="permission denied"):
                await s.execute(text(f"SELECT count(*) FROM {partition}"))
            await s.rollback()


async def test_definer_functions_answer_only_their_question(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with app_sessions.begin() as s:
        # Authentication works before any tenant is known...
        found = await api_keys.authenticate(s, stack.api_key)
        assert found is not None and found.tenant_id == stack.tenant_id
        # ...but the door those functions use stays shut for the app role.
        await s.execute(text("SELECT set_config('moat.definer_scope', 'on', true)"))
        assert (await s.execute(text("SELECT count(*) FROM api_keys"))).scalar_one() == 0
        assert (await s.execute(text("SELECT count(*) FROM tenants"))).scalar_one() == 0
        # The session's own setting came back after the lookup, and still opens nothing.
        await api_keys.authenticate(s, stack.api_key)
        assert (await s.execute(text("SELECT count(*) FROM api_keys"))).scalar_one() == 0


def _psycopg(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def test_a_non_superuser_owner_is_held_by_the_policies_too(
    base_settings: MoatSettings,
) -> None:
    """Production owners are rarely superusers: FORCE holds them to the policies, and the
    definer functions still authenticate and list tenants for them."""
    admin_url = _psycopg(base_settings.sqlalchemy_url)
    suffix = uuid.uuid4().hex[:8]
    owner, database = f"moat_owner_{suffix}", f"moat_owned_{suffix}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(owner)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(database), sql.Identifier(owner)
            )
        )
    owner_url = (
        admin_url.replace("postgresql://postgres@", f"postgresql://{owner}@").rsplit("/", 1)[0]
        + f"/{database}"
    )
    settings = base_settings.model_copy(update={"database_url": owner_url})
    upgrade(settings.sqlalchemy_url)

    owner_engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    app_engine = make_engine(settings.app_sqlalchemy_url, pool_size=1)
    try:
        async with make_sessionmaker(owner_engine).begin() as s:
            tenant = await tenants.create_tenant(s, "held")
            key = await api_keys.create_api_key(s, tenant.id)
        async with make_sessionmaker(owner_engine).begin() as s:
            # No tenant named: even the owner sees nothing...
            assert (await s.execute(text("SELECT count(*) FROM api_keys"))).scalar_one() == 0
            assert (await s.execute(text("SELECT count(*) FROM tenants"))).scalar_one() == 0
            # ...while the definer functions answer.
            assert [t.name for t in await tenants.list_tenants(s)] == ["held"]
            assert (await api_keys.authenticate(s, key)) is not None
        async with make_sessionmaker(app_engine).begin() as s:
            found = await api_keys.authenticate(s, key)
            assert found is not None and found.tenant_id == tenant.id
            await tenancy.set_tenant(s, tenant.id)
            assert (await tenants.get_tenant(s, tenant.id)) is not None
    finally:
        await owner_engine.dispose()
        await app_engine.dispose()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(owner)))


async def test_the_app_role_cannot_grant_a_tenant_privileges(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """``allow_bypass`` (and the policy and retention modes) change through the owner only,
    even for the app role's own tenant; creating a tenant cannot choose bypass either."""
    statements = [
        "UPDATE tenants SET allow_bypass = true WHERE id = :t",
        "UPDATE tenants SET policy_mode = 'bypass' WHERE id = :t",
        "UPDATE tenants SET retention_mode = 'standard' WHERE id = :t",
        "DELETE FROM tenants WHERE id = :t",
        "INSERT INTO tenants (id, name, allow_bypass) VALUES (:t || 'x', :t || 'x', true)",
    ]
    for statement in statements:
        async with app_sessions() as s:
            await tenancy.set_tenant(s, stack.tenant_id)
            with pytest.raises(ProgrammingError, match="permission denied"):
                await s.execute(text(statement), {"t": stack.tenant_id})
    async with stack.sessions() as s:
        allowed = (
            await s.execute(
                text("SELECT allow_bypass FROM tenants WHERE id = :t"), {"t": stack.tenant_id}
            )
        ).scalar_one()
    assert allowed is False
    # What the app role does legitimately still works: a tenant created by the admin API
    # (the column default applies), a key issued, listed and revoked.
    async with app_sessions.begin() as s:
        tenant = await tenants.create_tenant(s, f"t-{uuid.uuid4().hex[:12]}")
        key_row, _ = await api_keys.issue_api_key(s, tenant.id, "second")
        assert [k.id for k in await api_keys.list_api_keys(s, tenant.id)] == [key_row.id]
        revoked = await api_keys.revoke_api_key(s, key_row.id, key_row.created_at)
        assert revoked is not None and revoked.revoked_at == key_row.created_at
        await s.refresh(tenant)
        assert tenant.allow_bypass is False


async def test_key_hashes_never_reach_the_app_role(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    key_id, secret = stack.api_key.split("_", 2)[1:]
    right = hashlib.sha256(secret.encode()).hexdigest()
    lookup = "SELECT * FROM moat_lookup_api_key(:id, :hash)"
    async with app_sessions() as s:
        # A wrong secret's hash finds nothing, not even that the key exists.
        for wrong in ("0" * 64, hashlib.sha256(b"guess").hexdigest(), right[:-1], ""):
            rows = (await s.execute(text(lookup), {"id": key_id, "hash": wrong})).all()
            assert rows == []
        found = (await s.execute(text(lookup), {"id": key_id, "hash": right})).mappings().one()
        assert found["tenant_id"] == stack.tenant_id
        assert "secret_hash" not in found and right not in map(str, found.values())
        # The revocation path learns the tenant of a key id, and nothing else.
        tenant = (
            await s.execute(text("SELECT moat_api_key_tenant(:id)"), {"id": key_id})
        ).scalar_one()
        assert tenant == stack.tenant_id
        # The table itself: every column but the hash, for the transaction's tenant.
        await tenancy.set_tenant(s, stack.tenant_id)
        ids = (await s.execute(text("SELECT id FROM api_keys"))).scalars().all()
        assert ids == [key_id]
        for query in ("SELECT secret_hash FROM api_keys", "SELECT * FROM api_keys"):
            with pytest.raises(ProgrammingError, match="permission denied"):
                await s.execute(text(query))
            await s.rollback()
            await tenancy.set_tenant(s, stack.tenant_id)
        # The old one-argument lookup, which returned the hash for any key id, is gone.
        with pytest.raises(ProgrammingError, match="does not exist"):
            await s.execute(text("SELECT * FROM moat_lookup_api_key(:id)"), {"id": key_id})
        await s.rollback()
        # No function the app role may call returns the hash, by name or as a key row.
        leaking = (
            await s.execute(
                text(
                    "SELECT p.oid::regprocedure::text FROM pg_proc p"
                    " JOIN pg_namespace n ON n.oid = p.pronamespace"
                    " WHERE n.nspname = current_schema()"
                    " AND has_function_privilege(current_user, p.oid, 'EXECUTE')"
                    " AND ('secret_hash' = ANY(coalesce(p.proargnames, '{}'))"
                    "      OR p.prorettype = 'api_keys'::regtype)"
                )
            )
        ).all()
        assert leaking == []


async def test_the_hardening_migration_downgrades_to_the_old_lookup(
    base_settings: MoatSettings,
) -> None:
    """On a database of its own: down to 0004 restores the old function and grants, and up
    again restores the hardening."""
    admin_url = _psycopg(base_settings.sqlalchemy_url)
    database = f"moat_down_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    url = base_settings.sqlalchemy_url.rsplit("/", 1)[0] + f"/{database}"

    def migrate(direction: str, revision: str) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                cfg.attributes["connection"] = conn
                getattr(command, direction)(cfg, revision)
        finally:
            engine.dispose()

    def lookup_columns() -> list[str]:
        with psycopg.connect(_psycopg(url)) as conn:
            rows = conn.execute(
                "SELECT p.proargnames FROM pg_proc p WHERE p.proname = 'moat_lookup_api_key'"
            ).fetchall()
        return [name for (names,) in rows for name in names]

    def app_may_update_tenants() -> bool:
        with psycopg.connect(_psycopg(url)) as conn:
            row = conn.execute(
                "SELECT has_table_privilege(%s, 'tenants', 'UPDATE')", (APP_DATABASE_ROLE,)
            ).fetchone()
        return bool(row and row[0])

    try:
        await asyncio.to_thread(upgrade, url)
        assert "secret_hash" not in lookup_columns() and not app_may_update_tenants()
        await asyncio.to_thread(migrate, "downgrade", "0004")
        assert "secret_hash" in lookup_columns() and app_may_update_tenants()
        await asyncio.to_thread(migrate, "upgrade", "head")
        assert "secret_hash" not in lookup_columns() and not app_may_update_tenants()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))


async def test_the_app_role_cannot_set_a_tenant_allow_list(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The host allow-list opens a path into private networks: the gateway and worker's role
    may not write it, for its own tenant either; operators do, as the owner."""
    async with app_sessions() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        with pytest.raises(ProgrammingError, match="permission denied"):
            await s.execute(
                text("UPDATE tenants SET http_allow_hosts = '{169.254.169.254}' WHERE id = :t"),
                {"t": stack.tenant_id},
            )
        await s.rollback()
        # Nor by creating a tenant that has one from the start.
        tenant_id = f"ten_{uuid.uuid4().hex[:16]}"
        await tenancy.set_tenant(s, tenant_id)
        with pytest.raises(ProgrammingError, match="permission denied"):
            await s.execute(
                text(
                    "INSERT INTO tenants (id, name, http_allow_hosts)"
                    " VALUES (:t, :t, '{169.254.169.254}')"
                ),
                {"t": tenant_id},
            )
        await s.rollback()
    async with app_sessions.begin() as s:
        # The admin path's tenant creation, as the app role, still works (default: empty).
        tenant = await tenants.create_tenant(s, f"app-made-{uuid.uuid4().hex[:8]}")
        assert tenant.http_allow_hosts == []
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        row = await tenants.set_http_allow_hosts(s, stack.tenant_id, ["10.0.0.5:8443"])
        assert row is not None  # the owner may
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        tenant = await tenants.get_tenant(s, stack.tenant_id)
        assert tenant is not None and tenant.http_allow_hosts == ["10.0.0.5:8443"]


async def test_a_revoked_key_cannot_be_brought_back(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The app role may revoke (it sets ``revoked_at``), but never undo a revocation, nor
    move its time, so a leaked key once revoked stays refused."""
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        row, secret = await api_keys.issue_api_key(s, stack.tenant_id, "leaked")
        revoked = await api_keys.revoke_api_key(s, row.id, row.created_at)
        assert revoked is not None and revoked.revoked_at is not None
    for value in ("NULL", "now() + interval '1 day'"):
        async with app_sessions() as s:
            await tenancy.set_tenant(s, stack.tenant_id)
            with pytest.raises(DBAPIError, match="a revocation is final"):
                await s.execute(
                    text(f"UPDATE api_keys SET revoked_at = {value} WHERE id = :id"),
                    {"id": row.id},
                )
    async with app_sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        # Revoking again keeps the first revocation, as before.
        again = await api_keys.revoke_api_key(s, row.id, row.created_at)
        assert again is not None and again.revoked_at == revoked.revoked_at
        assert await api_keys.authenticate(s, secret) is None
