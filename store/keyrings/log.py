"""The transparency log's key: one Ed25519 key per deployment that signs every tenant's
checkpoints (each under its own key name, the tenant log's origin).

The private key is a PEM (PKCS #8) file, mode 0600, beside the manifest signing keyring;
its public half (PEM) beside it, which is all a gateway reads. Neither goes to the
database or a log line. A configured path (``MOAT_LOG_KEY``) must exist; only the
development default under ``MOAT_HOME`` is created on first use.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from schemas.settings import MoatSettings
from store.keyrings.files import PRIVATE, locked


class LogKeyMissingError(FileNotFoundError):
    """A configured log key (or its public half) is not there; nothing creates it silently."""


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def _read_private(path: Path) -> Ed25519PrivateKey:
    key = load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def load_or_create(path: Path, public_path: Path) -> Ed25519PrivateKey:
    """The key at ``path``, created (with its public half at ``public_path``) if missing."""
    with locked(path):
        if path.exists():
            key = _read_private(path)
        else:
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
            _write(path, pem, PRIVATE)
        if not public_path.exists():
            _write(public_path, _public_pem(key.public_key()), 0o644)
    return key


def signing_key(settings: MoatSettings) -> Ed25519PrivateKey:
    """The key that signs checkpoints (workers, ``moat log checkpoint``)."""
    if settings.log_key is not None:
        if not settings.log_key.exists():
            raise LogKeyMissingError(
                f"MOAT_LOG_KEY points at {settings.log_key}, which does not exist; create an "
                "Ed25519 key (PEM, PKCS #8) there and mount it on every worker"
            )
        return _read_private(settings.log_key)
    return load_or_create(settings.log_key_path, settings.log_public_key_path)


def public_key(settings: MoatSettings) -> Ed25519PublicKey:
    """The key that verifies checkpoints (gateways): the public file; in development, the
    default key is created if no process has made it yet."""
    path = settings.log_public_key_path
    if not path.exists():
        if settings.log_key is not None or settings.log_public_key is not None:
            raise LogKeyMissingError(f"no log public key at {path}")
        return load_or_create(settings.log_key_path, path).public_key()
    key = load_pem_public_key(path.read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} does not hold an Ed25519 public key")
    return key


def origin(settings: MoatSettings, tenant_id: str) -> str:
    """A tenant's log origin, which is also its checkpoints' key name."""
    return f"{settings.log_origin}/{tenant_id}"
