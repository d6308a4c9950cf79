"""Evidence of executions: their event log, their signed run manifests (indexed in
Postgres, stored as files), and the public keys that verify the manifests."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.events import Event
from schemas.settings import MoatSettings
from starter.service.errors import MoatError
from store import events as event_log
from store import manifests
from store.keyrings.signing import MalformedError, PublishedJwks
from store.manifests import ManifestStore
from store.models import ManifestRow

log = logging.getLogger("moat.evidence")


async def events_of(session: AsyncSession, tenant_id: str, receipt_id: str) -> list[Event]:
    """An execution's events in order (none: no such execution for this tenant)."""
    return await event_log.events_of(session, tenant_id, receipt_id)


@dataclass(frozen=True)
class StoredManifest:
    """A manifest file's bytes as stored, with what the index says of them."""

    data: bytes
    sha256: str
    run_id: str


async def indexed_manifest(
    session: AsyncSession, tenant_id: str, receipt_id: str, run_id: str | None = None
) -> ManifestRow:
    """The index row of an execution's original run's manifest (or of ``run_id``'s).
    ``MoatError("manifest_not_found")`` when none is indexed."""
    rows = await manifests.of_execution(session, tenant_id, receipt_id, run_id)
    if not rows:
        raise MoatError(ErrorCode.MANIFEST_NOT_FOUND, f"No manifest for execution {receipt_id}.")
    return rows[0]


async def read_manifest(store: ManifestStore, row: ManifestRow) -> StoredManifest:
    """An indexed manifest's file, byte for byte, so its digest matches the index.
    ``MoatError("manifest_not_found")`` when retention removed the file."""
    try:
        data = await asyncio.to_thread(store.read, row.tenant_id, row.run_id)
    except FileNotFoundError:
        raise MoatError(
            ErrorCode.MANIFEST_NOT_FOUND, "The manifest file is gone (retention)."
        ) from None
    return StoredManifest(data=data, sha256=row.sha256, run_id=row.run_id)


async def public_jwks(settings: MoatSettings, published: PublishedJwks) -> dict[str, Any]:
    """The public JWK Set that verifies manifests, as key creation and rotation published
    it. In development, before any worker has made the first key, an empty set;
    ``MoatError("jwks_unavailable")`` when a configured set cannot be read."""
    try:
        return await asyncio.to_thread(published.current)
    except FileNotFoundError:
        if settings.jwks_path is None and settings.signing_keyring is None:
            return {"keys": []}
        log.error("no public JWKS at %s", published.path)
        raise _jwks_unavailable() from None
    except (OSError, MalformedError) as exc:
        log.error("cannot serve the public JWKS at %s: %s", published.path, exc)
        raise _jwks_unavailable() from None


def _jwks_unavailable() -> MoatError:
    return MoatError(
        ErrorCode.JWKS_UNAVAILABLE,
        "The gateway has no readable public key set; an operator publishes it with "
        "`moat signing-key publish` (or its old name, `moat keys publish`) at MOAT_JWKS_PATH.",
    )
