"""A connection's fingerprint is an HMAC of its secret under a key derived from the server's
connection key: stable for one secret under one key, different under another key, and not
the bare digest anyone could check a guessed secret against. A row stored with the old bare
digest gets its keyed fingerprint the next time its secret is opened."""

from __future__ import annotations

import hashlib
import os
import uuid

from sqlalchemy import delete, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.connections import StoreConnectionResolver
from schemas.connections import ConnectionType
from store import connections, tenancy, tenants
from store.keyrings.connections import ConnectionCipher
from store.models import ConnectionRow

SECRET = "xoxb-" + "f1ngerpr1nt" * 4


def _cipher(kid: str = "k1", key: bytes | None = None) -> ConnectionCipher:
    return ConnectionCipher({kid: key or os.urandom(32)}, kid)


def test_the_fingerprint_is_keyed_stable_and_differs_across_server_keys() -> None:
    key = os.urandom(32)
    cipher = _cipher("k1", key)
    fingerprint = cipher.fingerprint(SECRET)
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert fingerprint.startswith("hmac:") and len(fingerprint) == len("hmac:") + 16
    assert fingerprint.removeprefix("hmac:") not in digest
    assert cipher.fingerprint(SECRET) == fingerprint
    assert cipher.fingerprint(SECRET + "x") != fingerprint
    assert _cipher().fingerprint(SECRET) != fingerprint  # another server key
    assert _cipher("k2", key).fingerprint(SECRET) == fingerprint  # the key decides, not its id


async def test_rows_get_keyed_fingerprints_and_legacy_ones_are_rekeyed_on_use(
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    key = os.urandom(32)
    cipher = _cipher("k1", key)
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"fp-{uuid.uuid4().hex[:8]}")
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        row = await connections.create_connection(
            session,
            cipher,
            tenant_id=tenant.id,
            type=ConnectionType.SLACK,
            name="fp",
            secret=SECRET,
            config={},
        )
        connection_id, keyed = row.id, row.fingerprint
    assert keyed == cipher.fingerprint(SECRET)

    legacy = "sha256:" + hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        await session.execute(
            update(ConnectionRow)
            .where(ConnectionRow.id == connection_id)
            .values(fingerprint=legacy)
        )
    credential = await StoreConnectionResolver(app_sessions, cipher).resolve(
        tenant.id, connection_id
    )
    assert credential.secret == SECRET
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        stored = await connections.get_connection(session, tenant.id, connection_id)
    assert stored is not None and stored.fingerprint == keyed

    # Re-encryption under a new key keys the fingerprint anew.
    newer = ConnectionCipher({"k1": key, "k9": os.urandom(32)}, "k9")
    async with tenancy.tenant_transaction(app_sessions, tenant.id) as session:
        assert await connections.reencrypt_connections(session, newer, tenant.id) == 1
        stored = await connections.get_connection(session, tenant.id, connection_id)
    assert stored is not None and stored.key_id == "k9"
    assert stored.fingerprint == newer.fingerprint(SECRET) != keyed
    # The row is sealed under keys no other test holds: gone, `moat connection reencrypt`
    # in a later test of this process opens every tenant's connections.
    async with sessions.begin() as session:
        await session.execute(delete(ConnectionRow).where(ConnectionRow.id == connection_id))
