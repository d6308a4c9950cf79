"""The keys that seal connection secrets at rest (AES-256-GCM).

A keyring file (mode 0600) ``{"active": kid, "keys": {kid: base64url key}}`` every gateway
and worker shares (``MOAT_CONNECTION_KEYRING``, else ``$MOAT_HOME/connection-keys.json``,
created on first use in development), and/or one key from the environment
(``MOAT_CONNECTION_KEY=<kid>:<base64url>``), which then seals new secrets. Each sealed
secret keeps the id of its key beside it, so old keys keep opening what they sealed until
``moat connection reencrypt`` has moved everything to the active key. The associated data
names the tenant and the connection: a ciphertext copied to another row does not open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from schemas.settings import MoatSettings
from store.keyrings.files import locked, replace_json, symmetric_keyring

NONCE_BYTES = 12
KEY_BYTES = 32
# The last characters of a secret are shown only when the secret is long enough that they
# give little of it away.
LAST4_MIN_LENGTH = 16


@dataclass(frozen=True)
class Sealed:
    key_id: str
    nonce: bytes
    ciphertext: bytes


def context(tenant_id: str, connection_id: str) -> bytes:
    return f"moat connection v1\n{tenant_id}\n{connection_id}".encode()


FINGERPRINT_PREFIX = "hmac:"
# What fingerprints were before they were keyed: a bare SHA-256 anyone could test a guessed
# secret against. Such a row gets a keyed one the next time its secret is opened.
LEGACY_FINGERPRINT_PREFIX = "sha256:"
_FINGERPRINT_INFO = b"moat connection fingerprint v1"


def fingerprint_key(sealing_key: bytes) -> bytes:
    """The HMAC key of fingerprints, derived (HKDF-SHA256) from a sealing key: a key of its
    own, so a fingerprint says nothing about the key that seals."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_FINGERPRINT_INFO).derive(
        sealing_key
    )


def keyed_fingerprint(key: bytes, secret: str) -> str:
    """``hmac:`` and the first 16 hex digits of HMAC-SHA256(``key``, secret): tells two
    secrets apart without showing either, and, unlike a bare digest, cannot be checked
    against a guessed secret without the server's key."""
    digest = hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()
    return FINGERPRINT_PREFIX + digest[:16]


def last4(secret: str) -> str:
    return secret[-4:] if len(secret) >= LAST4_MIN_LENGTH else ""


def parse_env_key(value: str) -> tuple[str, bytes]:
    """``<kid>:<base64url of 32 bytes>`` → (kid, key); ``ValueError`` says what is wrong
    without repeating the value."""
    kid, sep, encoded = value.partition(":")
    try:
        key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if not sep or not kid or len(key) != KEY_BYTES:
        raise ValueError("MOAT_CONNECTION_KEY must be `<key id>:<base64url of 32 random bytes>`")
    return kid, key


class ConnectionCipher:
    """Seals and opens connection secrets. Build with ``from_settings``."""

    def __init__(
        self,
        keys: dict[str, bytes],
        active: str,
        keyring_path: Path | None = None,
        *,
        active_from_env: bool = False,
    ) -> None:
        if active not in keys:
            raise ValueError(f"connection keyring: active key {active!r} is not in the keyring")
        self._keys = dict(keys)
        self._active = active
        # Re-read when a secret names a key this process has not loaded yet (a key added
        # and made active by another process since this one started).
        self._path = keyring_path
        self._pinned_active = active_from_env

    @classmethod
    def from_settings(cls, settings: MoatSettings) -> ConnectionCipher:
        path = settings.connection_keyring_path
        env_key = settings.connection_key
        keys: dict[str, bytes] = {}
        active = ""
        if env_key is None or settings.connection_keyring is not None or path.exists():
            keys, active = symmetric_keyring(
                path,
                configured_as=(
                    "MOAT_CONNECTION_KEYRING" if settings.connection_keyring is not None else None
                ),
                new_kid="c-" + secrets.token_hex(4),
            )
        if env_key is not None:
            kid, key = parse_env_key(env_key.get_secret_value())
            keys[kid] = key
            active = kid
        return cls(keys, active, path, active_from_env=env_key is not None)

    @property
    def active_key_id(self) -> str:
        return self._active

    def seal(self, secret: str, ctx: bytes) -> Sealed:
        nonce = os.urandom(NONCE_BYTES)
        key = self._keys[self._active]
        return Sealed(self._active, nonce, AESGCM(key).encrypt(nonce, secret.encode(), ctx))

    def fingerprint(self, secret: str, key_id: str | None = None) -> str:
        """The secret's fingerprint under the key ``key_id`` (the active one by default), the
        key that seals it: the same secret has the same fingerprint under one key."""
        kid = key_id or self._active
        key = self._keys.get(kid) or self._reload(kid)
        if key is None:
            raise KeyError(f"connection key {kid!r} is not in this process's keyring")
        return keyed_fingerprint(fingerprint_key(key), secret)

    def open(self, sealed: Sealed, ctx: bytes) -> str:
        key = self._keys.get(sealed.key_id) or self._reload(sealed.key_id)
        if key is None:
            raise KeyError(
                f"connection key {sealed.key_id!r} is not in this process's keyring: give "
                "every gateway and worker the same MOAT_CONNECTION_KEYRING"
            )
        return AESGCM(key).decrypt(sealed.nonce, sealed.ciphertext, ctx).decode()

    def _reload(self, kid: str) -> bytes | None:
        if self._path is None or not self._path.exists():
            return None
        keys, active = symmetric_keyring(self._path, configured_as=str(self._path), new_kid="")
        self._keys.update(keys)
        if not self._pinned_active:
            self._active = active
        return self._keys.get(kid)

    def add_key(self) -> str:
        """A fresh key, added to the keyring file and made its active one (the file's
        holders pick it up when they meet it); its id."""
        if self._path is None or self._pinned_active:
            raise ValueError(
                "the active connection key comes from MOAT_CONNECTION_KEY: set a new one there"
            )
        kid = "c-" + secrets.token_hex(4)
        with locked(self._path):
            keys, _ = symmetric_keyring(self._path, configured_as=str(self._path), new_kid="")
            keys[kid] = os.urandom(KEY_BYTES)
            encoded = {k: base64.urlsafe_b64encode(v).decode() for k, v in keys.items()}
            replace_json(self._path, {"active": kid, "keys": encoded})
        self._keys.update(keys)
        self._active = kid
        return kid
