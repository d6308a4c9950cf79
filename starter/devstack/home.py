"""What ``moat up`` keeps in ``$MOAT_HOME`` besides the servers' data: the embedded
database's role passwords, the admin key and the demo tenant's API key (files 0600)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from pathlib import Path

from schemas.scopes import (
    APPROVALS_READ,
    APPROVALS_WRITE,
    DEFAULT_SCOPES,
    OUTPUTS_READ,
    PLANS_WRITE,
    POLICY_WRITE,
    WEBHOOKS_WRITE,
)
from schemas.settings import APP_DATABASE_ROLE, OWNER_DATABASE_ROLE, MoatSettings

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "moat up"
ADMIN_KEY_FILE = "admin_api_key"
# The demo key also manages webhooks, so `moat webhook listen` works on the dev stack, and
# resumes and cancels plans.
DEMO_SCOPES = (*DEFAULT_SCOPES, WEBHOOKS_WRITE, PLANS_WRITE)
# The demo approver: a second key of the demo tenant that sets policy and decides approvals
# (in the console, /console), so the key that makes a call is never the one approving it
# (separation of duties). It executes nothing.
DEMO_APPROVER_KEY_FILE = "demo_approver_key"
DEMO_APPROVER_NAME = "moat up approver"
DEMO_APPROVER_SCOPES = (APPROVALS_READ, APPROVALS_WRITE, POLICY_WRITE, OUTPUTS_READ)


async def _ensure_demo_tenant(settings: MoatSettings) -> str:
    # The database is loaded here only: reading the keys (every CLI command) needs none of it.
    from starter.runtime.database import owner_transaction
    from starter.service import tenants
    from store import api_keys

    path = settings.demo_api_key_path
    async with owner_transaction(settings) as session:
        if path.exists():
            key = path.read_text().strip()
            known = await api_keys.authenticate(session, key)
            if known is not None and set(DEMO_SCOPES) <= set(known.scopes):
                return key
        tenant = await tenants.find_tenant(session, DEMO_TENANT)
        if tenant is None:
            created = await tenants.create_tenant(
                session,
                DEMO_TENANT,
                idempotency_ttl_seconds=settings.idempotency_ttl_seconds,
                key_name=DEMO_KEY_NAME,
                scopes=DEMO_SCOPES,
            )
            key = created.api_key.api_key
        else:
            key = (await tenants.create_key(session, tenant.id, DEMO_KEY_NAME, DEMO_SCOPES)).api_key
    _write_private(path, key, replace=True)
    return key


def ensure_demo_tenant(settings: MoatSettings) -> str:
    """The demo tenant's API key, created on first use and kept in ``$MOAT_HOME``."""
    return asyncio.run(_ensure_demo_tenant(settings))


async def _ensure_demo_approver(settings: MoatSettings) -> str:
    from starter.runtime.database import owner_transaction
    from starter.service import tenants
    from store import api_keys

    path = settings.home / DEMO_APPROVER_KEY_FILE
    async with owner_transaction(settings) as session:
        if path.exists():
            key = path.read_text().strip()
            known = await api_keys.authenticate(session, key)
            if known is not None and set(DEMO_APPROVER_SCOPES) <= set(known.scopes):
                return key
        tenant = await tenants.find_tenant(session, DEMO_TENANT)
        assert tenant is not None, "the demo tenant comes first (ensure_demo_tenant)"
        made = await tenants.create_key(
            session, tenant.id, DEMO_APPROVER_NAME, DEMO_APPROVER_SCOPES
        )
    _write_private(path, made.api_key, replace=True)
    return made.api_key


def ensure_demo_approver(settings: MoatSettings) -> str:
    """The demo tenant's approver key (``DEMO_APPROVER_SCOPES``), created on first use and
    kept in ``$MOAT_HOME``: it signs in to the console to set policy and approve."""
    return asyncio.run(_ensure_demo_approver(settings))


def admin_key(settings: MoatSettings) -> str | None:
    """The admin key: the configured one, else the one ``moat up`` keeps in ``$MOAT_HOME``."""
    if settings.admin_api_key is not None:
        return settings.admin_api_key.get_secret_value()
    path = settings.home / ADMIN_KEY_FILE
    return path.read_text().strip() if path.exists() else None


def ensure_admin_key(settings: MoatSettings) -> str:
    """The admin key of the local stack, generated on first use and kept (mode 0600) in
    ``$MOAT_HOME`` when none is configured."""
    key = admin_key(settings)
    if key is None:
        key = "moat_admin_" + secrets.token_urlsafe(32)
        _write_private(settings.home / ADMIN_KEY_FILE, key, replace=False)
    return key


def ensure_database_passwords(settings: MoatSettings) -> dict[str, str]:
    """The embedded Postgres's role passwords (owner and application role), generated on
    first use and kept (mode 0600) in ``$MOAT_HOME``."""
    roles = (OWNER_DATABASE_ROLE, APP_DATABASE_ROLE)
    known = {role: settings.embedded_database_password(role) for role in roles}
    if all(known.values()):
        return {role: password for role, password in known.items() if password}
    passwords = {role: known[role] or secrets.token_urlsafe(32) for role in roles}
    _write_private(settings.database_passwords_path, json.dumps(passwords), replace=True)
    return passwords


def _write_private(path: Path, secret: str, *, replace: bool) -> None:
    """A secret file readable by its owner only (mode 0600 from its creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    with os.fdopen(os.open(path, flags, 0o600), "w") as fh:
        fh.write(secret + "\n")
