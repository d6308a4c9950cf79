"""The read-scope migration: keys made before read scopes existed keep the reads their role
needs (a key that executes reads outputs, a key that decides approvals reads them) and gain
no write; row-level security stays forced on ``api_keys``."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql
from sqlalchemy import select

from schemas.settings import MoatSettings
from store import api_keys, make_engine, make_sessionmaker, tenancy, tenants, upgrade
from store.models import ApiKey

BEFORE = "0013"
KEPT_AS_THEY_ARE = (["policy:write"], ["*"], ["execute:*", "outputs:read"], ["approvals:*"])


async def test_existing_keys_keep_the_reads_their_role_needs(base_settings: MoatSettings) -> None:
    admin_url = base_settings.sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://")
    suffix = uuid.uuid4().hex[:8]
    # A non-superuser owner, as in production: FORCE holds it to the policies.
    owner, database = f"moat_owner_{suffix}", f"moat_scopes_{suffix}"
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
    url = base_settings.model_copy(update={"database_url": owner_url}).sqlalchemy_url
    engine = make_engine(url, pool_size=1)
    try:
        upgrade(url, BEFORE)
        made: dict[str, list[str]] = {}
        async with make_sessionmaker(engine).begin() as s:
            tenant = await tenants.create_tenant(s, "old")
            for scopes in (
                ["execute:*"],
                ["execute:demo.echo", "approvals:write"],
                *KEPT_AS_THEY_ARE,
            ):
                row, _ = await api_keys.issue_api_key(s, tenant.id, scopes=scopes)
                made[row.id] = scopes
        upgrade(url)
        async with make_sessionmaker(engine).begin() as s:
            await tenancy.set_tenant(s, tenant.id)
            rows = (await s.execute(select(ApiKey.id, ApiKey.scopes))).all()
        now = {key: list(scopes) for key, scopes in rows}
        expected = {key: list(scopes) for key, scopes in made.items()}
        for key, scopes in made.items():
            if scopes == ["execute:*"]:
                expected[key] = ["execute:*", "outputs:read"]
            elif scopes == ["execute:demo.echo", "approvals:write"]:
                expected[key] = [*scopes, "outputs:read", "approvals:read"]
        assert now == expected
        with psycopg.connect(admin_url.rsplit("/", 1)[0] + f"/{database}") as conn:
            forced = conn.execute(
                "SELECT relforcerowsecurity FROM pg_class WHERE relname = 'api_keys'"
            ).fetchone()
        assert forced == (True,)
    finally:
        await engine.dispose()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(owner)))
