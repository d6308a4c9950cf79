"""The payload codec's keyring, and sealing with it what Moat keeps of an output.

The keyring is a JSON file (mode 0600) ``{"active": kid, "keys": {kid: base64url key}}``
that every gateway and worker shares: the Temporal payload codec encrypts history with it,
and ``OutputSealer`` the outputs kept in Postgres for the idempotency window, so one key
rotation covers both. Old keys stay in the ring until nothing they sealed is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schemas.settings import MoatSettings
from store.keyrings.files import symmetric_keyring

NONCE_BYTES = 12


def keyring_path(settings: MoatSettings) -> Path:
    return settings.codec_keyring or settings.home / "codec-keys.json"


def load_codec_keys(settings: MoatSettings) -> tuple[dict[str, bytes], str]:
    """The keys and the active key id from ``MOAT_CODEC_KEYRING``, or from
    ``$MOAT_HOME/codec-keys.json``, which is created with a fresh key on first use
    (development only: a configured keyring that is missing is an error, never silently
    replaced)."""
    return symmetric_keyring(
        keyring_path(settings),
        configured_as="MOAT_CODEC_KEYRING" if settings.codec_keyring is not None else None,
        new_kid="k1",
    )


class OutputSealer:
    """AES-256-GCM with the codec's keys. The associated data names what was sealed (the
    tenant and receipt), so a sealed value copied to another row does not open there."""

    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        if active not in keys:
            raise ValueError(f"active codec key {active!r} is not in the keyring")
        self._ciphers = {kid: AESGCM(key) for kid, key in keys.items()}
        self._active = active

    @classmethod
    def from_settings(cls, settings: MoatSettings) -> OutputSealer:
        return cls(*load_codec_keys(settings))

    def seal(self, plaintext: bytes, context: bytes) -> tuple[str, bytes]:
        """The active key's id, and nonce + ciphertext."""
        nonce = os.urandom(NONCE_BYTES)
        return self._active, nonce + self._ciphers[self._active].encrypt(nonce, plaintext, context)

    def open(self, kid: str, sealed: bytes, context: bytes) -> bytes:
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise ValueError(f"output sealed with unknown codec key {kid!r}")
        return cipher.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context)
