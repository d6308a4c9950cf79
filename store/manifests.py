"""Write-once storage of run manifests: ``{root}/{tenant_id}/{run_id}/manifest.json``.

A manifest is evidence, so it is never replaced: it is written to a temporary file,
flushed, then hard-linked into place, which fails if the name exists. Readers therefore
see either no manifest or a complete one, and a crash mid-write leaves no half file that
would block the retried activity. Deletion exists only for retention.

Manifests are readable by Moat's own user only: files 0600, and every folder Moat makes
under the root (the root itself when it creates it, tenant and run folders always) 0700.

The index (table ``manifests``: path, digest, key, outcome per run) is what readers and
retention query; a file is indexed after it is written and deleted after its row, so an
indexed manifest always has its file until retention takes both.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict, Unpack

from sqlalchemy import bindparam, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.canonical import sha256_digest
from schemas.manifest import RunManifest, parse_document, signing_input
from store import event_writes, translog
from store.db import DriverStatement, table_of
from store.models import ManifestRow

MANIFEST_NAME = "manifest.json"
FILE_MODE = 0o600
DIR_MODE = 0o700
# How many folders ``ManifestStore.make_folder`` made are remembered until their manifest.
MADE_FOLDERS_KEPT = 1024


class ManifestExistsError(FileExistsError):
    """A different manifest is already stored for this tenant and run."""


@dataclass(frozen=True)
class Staged:
    """A manifest's bytes durable in a temporary file (``tmp``) beside its place (``path``),
    not yet published (``ManifestStore.stage``)."""

    tmp: Path
    path: Path
    data: bytes


def _check_segment(kind: str, value: str) -> str:
    """Tenant and run ids become directory names: refuse anything that could leave the
    root or alias another entry."""
    if (
        not value
        or value in (".", "..")
        or any(c in value for c in ("/", "\\", "\x00"))
        or value != value.strip()
    ):
        raise ValueError(f"invalid {kind} for a manifest path: {value!r}")
    return value


def _is_id(value: str) -> bool:
    try:
        _check_segment("id", value)
    except ValueError:
        return False
    return not value.startswith(".")


def manifest_bytes(manifest: RunManifest) -> bytes:
    """The file form: pretty, sorted, UTF-8 JSON. Verification does not depend on it (the
    signatures cover the RFC 8785 form), but a stable form makes retries byte-identical."""
    document = manifest.model_dump(mode="json")
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _private_dir(path: Path) -> None:
    """``path`` as a folder only its owner can enter; an existing one open to others is
    closed."""
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if path.stat().st_mode & 0o777 != DIR_MODE:
            path.chmod(DIR_MODE)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ManifestStore:
    """Manifests of every tenant under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Run folders made (and their entries flushed) ahead of their manifest by
        # ``make_folder``, which ``stage`` then need not make again; the oldest are forgotten.
        self._made: dict[Path, None] = {}
        self._made_lock = threading.Lock()

    def path_for(self, tenant_id: str, run_id: str) -> Path:
        tenant = _check_segment("tenant_id", tenant_id)
        run = _check_segment("run_id", run_id)
        return self.root / tenant / run / MANIFEST_NAME

    def write(self, manifest: RunManifest) -> tuple[Path, str]:
        """Store ``manifest``; returns its path and the ``sha256:`` of the file's bytes.
        Raises ``ManifestExistsError`` if any manifest is already stored for the run."""
        return self.publish(self.stage(manifest))

    def make_folder(self, tenant_id: str, run_id: str) -> None:
        """The run's folder made and its entry flushed, ahead of its manifest (``stage``
        does it otherwise): a step that will store the manifest soon does it beside other
        work, once (a folder made and still remembered is not made again). An empty folder
        is left if none comes (as by a discarded manifest)."""
        folder = self.path_for(tenant_id, run_id).parent
        with self._made_lock:
            if folder in self._made:
                return
        self._make(folder)
        with self._made_lock:
            if len(self._made) >= MADE_FOLDERS_KEPT:
                self._made.pop(next(iter(self._made)))
            self._made[folder] = None

    def _make(self, folder: Path) -> None:
        # A root that exists is the operator's to set up; one we create is private.
        self.root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _private_dir(folder.parent)
        _private_dir(folder)
        # The run's folder lasts before anything is published in it (an empty one is left
        # by a discarded manifest, as by a crash mid-write).
        _fsync_dir(folder.parent)

    def stage(self, manifest: RunManifest) -> Staged:
        """``write``'s first half: the bytes in a temporary file beside the manifest's place,
        flushed to disk, visible to no reader until ``publish`` (or gone with ``discard``)."""
        path = self.path_for(manifest.tenant_id, manifest.run_id)
        data = manifest_bytes(manifest)
        with self._made_lock:
            made = self._made.pop(path.parent, False) is None  # by ``make_folder``
        if not made:
            self._make(path.parent)
        tmp = path.with_name(f".{MANIFEST_NAME}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return Staged(tmp, path, data)

    def publish(self, staged: Staged, *, replace_unrecorded: bool = False) -> tuple[Path, str]:
        """``write``'s second half: the staged file linked into place, write-once, and its
        folder flushed (the folder's own entry was, by ``stage``). Raises
        ``ManifestExistsError`` if any manifest is already stored for the run; the temporary
        file is gone either way.

        ``replace_unrecorded``: the caller knows that the run's receipt is not recorded (its
        own transaction is writing it), so a manifest stored for the run is one an attempt
        left that died before its commit, which nothing indexes: it is replaced, at once
        for readers, rather than refused."""
        try:
            try:
                self._link(staged.tmp, staged.path, staged.data)
            except ManifestExistsError:
                if not replace_unrecorded:
                    raise
                os.replace(staged.tmp, staged.path)
        finally:
            self.discard(staged)
        _fsync_dir(staged.path.parent)
        return staged.path, sha256_digest(staged.data)

    @staticmethod
    def discard(staged: Staged) -> None:
        """A staged manifest that will not be published, removed."""
        staged.tmp.unlink(missing_ok=True)

    @staticmethod
    def _link(tmp: Path, path: Path, data: bytes) -> None:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise ManifestExistsError(f"a manifest is already stored at {path}") from None
        except OSError as exc:
            # Filesystems without hard links: exclusive create is still write-once, only
            # not atomic for readers.
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            except FileExistsError:
                raise ManifestExistsError(f"a manifest is already stored at {path}") from None
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())

    def write_or_get(self, manifest: RunManifest) -> tuple[Path, str]:
        """``write``, for activities that may run again: if the run's manifest exists with
        the same signed content (identical bytes, or only signatures differ, as ECDSA
        signatures do each time), returns the stored one's path and digest instead.
        Raises ``ManifestExistsError`` when the stored content differs."""
        try:
            return self.write(manifest)
        except ManifestExistsError:
            path = self.path_for(manifest.tenant_id, manifest.run_id)
            existing = path.read_bytes()
            if existing != manifest_bytes(manifest):
                try:
                    same = signing_input(parse_document(existing)) == signing_input(manifest)
                except ValueError:
                    same = False
                if not same:
                    raise ManifestExistsError(
                        f"a manifest with different content is stored at {path}"
                    ) from None
            return path, sha256_digest(existing)

    def read(self, tenant_id: str, run_id: str) -> bytes:
        """The stored bytes; ``FileNotFoundError`` when there is no manifest for the run."""
        return self.path_for(tenant_id, run_id).read_bytes()

    def exists(self, tenant_id: str, run_id: str) -> bool:
        return self.path_for(tenant_id, run_id).exists()

    def tenants(self) -> list[str]:
        """The tenants that have manifests here (one folder each)."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _is_id(p.name))

    def delete(self, tenant_id: str, run_id: str) -> bool:
        """Remove a manifest (retention only); True if there was one."""
        path = self.path_for(tenant_id, run_id)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        with contextlib.suppress(OSError):  # not empty: something else lives beside it
            path.parent.rmdir()
        _fsync_dir(path.parent.parent)
        return True


# --- the index ---------------------------------------------------------------------------


async def index_row(session: AsyncSession, tenant_id: str, run_id: str) -> ManifestRow | None:
    """The index row of a run's manifest."""
    return (
        await session.execute(
            select(ManifestRow).where(
                ManifestRow.tenant_id == tenant_id, ManifestRow.run_id == run_id
            )
        )
    ).scalar_one_or_none()


_INDEX = table_of(ManifestRow)


def _insert_index(*, new_only: bool = False) -> Any:
    """The manifest's index row and, only when it is new, its transparency-log leaf: one
    statement (the leaf is selected from the row's insert); the new row's id, if any.
    ``new_only``: the statement fails (``NOT_NEW``) when the row was there already, so that
    nothing sent after it in its transaction (its events, its COMMIT) takes effect."""
    columns = [c for c in _INDEX.c if c.name != "created_at"]
    new_index = (
        insert(_INDEX)
        .values({c.name: bindparam(c.name, type_=c.type) for c in columns})
        .on_conflict_do_nothing()
        .returning(_INDEX.c.id, _INDEX.c.tenant_id)
        .cte("new_index")
    )
    leaf = translog.appended_with(new_index, "manifest")
    if not new_only:
        return select(new_index.c.id).add_cte(leaf)
    written = select(func.count()).select_from(new_index).scalar_subquery()
    return select(literal(1) / written).add_cte(leaf)  # 1 / 0 when nothing was written


# Every run writes one: built once, executed with fresh parameters only.
_INSERT_INDEX = _insert_index()
_INSERT_NEW_INDEX = DriverStatement(_insert_index(new_only=True))
# What ``new_index`` fails with when the row was there already: a division by zero, as a
# batch of events partly in the log fails (``events.append_committing`` raises it as such).
NOT_NEW = event_writes.PARTIAL


class IndexRow(TypedDict):
    """A manifest's index row, as ``index`` writes it."""

    id: str
    tenant_id: str
    receipt_id: str
    run_id: str
    path: str
    sha256: str
    kid: str
    alg: str
    replayed: bool
    outcome: str


def _index_values(row: IndexRow) -> dict[str, Any]:
    """The row's values, with its leaf's (``translog.manifest_digest``: the file's digest)."""
    return {**row, "leaf_digest": translog.manifest_digest(row["sha256"])}


async def index(session: AsyncSession, **row: Unpack[IndexRow]) -> bool:
    """Index a written manifest, with its leaf in the tenant's transparency log (its data
    the file's digest, ``translog.manifest_digest``); False when its row exists already (a
    retried step: neither is written again)."""
    values = _index_values(row)
    return (await session.execute(_INSERT_INDEX, values)).scalar_one_or_none() is not None


def new_index(**row: Unpack[IndexRow]) -> tuple[str, dict[str, Any]]:
    """``index`` as a statement to send past SQLAlchemy (``db.pipelined``), for a row that
    must be new: it fails with ``NOT_NEW`` when the row exists already."""
    return _INSERT_NEW_INDEX.sql, _INSERT_NEW_INDEX.params(_index_values(row))


async def of_execution(
    session: AsyncSession, tenant_id: str, receipt_id: str, run_id: str | None = None
) -> Sequence[ManifestRow]:
    """An execution's manifests (one run's with ``run_id``), the original run's first."""
    stmt = select(ManifestRow).where(
        ManifestRow.tenant_id == tenant_id, ManifestRow.receipt_id == receipt_id
    )
    if run_id is not None:
        stmt = stmt.where(ManifestRow.run_id == run_id)
    return (
        (await session.execute(stmt.order_by(ManifestRow.replayed, ManifestRow.created_at)))
        .scalars()
        .all()
    )


async def older_than(
    session: AsyncSession, tenant_id: str, horizon: datetime, limit: int
) -> Sequence[ManifestRow]:
    """Up to ``limit`` of a tenant's index rows created before ``horizon``, oldest first."""
    return (
        (
            await session.execute(
                select(ManifestRow)
                .where(ManifestRow.tenant_id == tenant_id, ManifestRow.created_at < horizon)
                .order_by(ManifestRow.created_at)
                .limit(limit)
            )
        )
        .scalars()
        .all()
    )


async def unindex(session: AsyncSession, row_id: str) -> None:
    """Delete an index row (retention; the database refuses it in compliance mode)."""
    await session.execute(delete(ManifestRow).where(ManifestRow.id == row_id))
