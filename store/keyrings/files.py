"""How key files are written: whole or not at all, private to Moat's user, one writer at a
time. Readers (gateways, workers) never see half a file."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PRIVATE = 0o600


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialize creation and rotation of ``path`` between processes (``moat up``, gateways,
    workers, the CLI), with an advisory lock on ``<path>.lock``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, PRIVATE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def replace_json(path: Path, document: Mapping[str, Any], mode: int = PRIVATE) -> None:
    """Replace ``path`` with ``document``: readers see the old file or the new one. The
    caller holds ``locked(path)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        json.dump(document, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def create_json(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` at ``path`` (mode 0600) unless another process got there first (a
    gateway and a worker starting together): written aside, then linked into place, which
    fails when the file exists, so nobody reads a half-written file and the first one
    written is the one everybody uses."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def symmetric_keyring(
    path: Path, *, configured_as: str | None, new_kid: str
) -> tuple[dict[str, bytes], str]:
    """The keys and the active key id of a ring ``{"active": kid, "keys": {kid: base64url
    of 32 bytes}}``. A ring that does not exist is created with one fresh key when it is the
    development default; when an operator configured its path (``configured_as`` names the
    setting) it is an error, never silently replaced by a key no other process has."""
    if not path.exists():
        if configured_as is not None:
            raise FileNotFoundError(
                f"{configured_as} points at {path}, which does not exist; mount the keyring "
                "every gateway and worker shares"
            )
        key = base64.urlsafe_b64encode(os.urandom(32)).decode()
        create_json(path, {"active": new_kid, "keys": {new_kid: key}})
    ring = json.loads(path.read_text())
    keys = {kid: base64.urlsafe_b64decode(value) for kid, value in ring["keys"].items()}
    return keys, str(ring["active"])
