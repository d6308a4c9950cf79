"""A witness's own files: its Ed25519 key and its state, never Moat's database.

The key file is one line, ``PRIVATE+KEY+<name>+<key hash hex>+<base64(0x04 || seed)>``
(the signed-note convention for a signer key), mode 0600. The state file is JSON, one
entry per origin: the size, root (base64) and body of the last checkpoint the witness
cosigned. Both are written to a new file renamed over the old, so a crash leaves the old
one whole."""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from schemas.translog import (
    ALG_COSIGNATURE_V1,
    Checkpoint,
    NoteError,
    key_hash,
    make_vkey,
    parse_checkpoint,
    public_key_bytes,
)

KEY_PREFIX = "PRIVATE+KEY+"


class WitnessFileError(ValueError):
    """A key or state file that cannot be read as one."""


@dataclass(frozen=True)
class WitnessKey:
    name: str
    key: Ed25519PrivateKey

    @property
    def vkey(self) -> str:
        return make_vkey(self.name, self.key.public_key(), ALG_COSIGNATURE_V1)


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path`` (mode 0600), through a new file renamed over the old."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def new_key(name: str) -> WitnessKey:
    key = WitnessKey(name, Ed25519PrivateKey.generate())
    key.vkey  # noqa: B018 - refuses a name a key cannot have, before anything is written
    return key


def key_text(key: WitnessKey) -> str:
    seed = key.key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    hashed = key_hash(key.name, ALG_COSIGNATURE_V1, public_key_bytes(key.key.public_key()))
    encoded = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + seed).decode()
    return f"{KEY_PREFIX}{key.name}+{hashed.hex()}+{encoded}\n"


def read_key(path: Path) -> WitnessKey:
    """The witness key in ``path`` (``WitnessFileError`` if it is not one)."""
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise WitnessFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    parts = text.removeprefix(KEY_PREFIX).split("+", 2) if text.startswith(KEY_PREFIX) else []
    try:
        name, hash_hex, encoded = parts
        raw = base64.b64decode(encoded, validate=True)
        if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
            raise ValueError("not a cosignature/v1 key")
        key = WitnessKey(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        hashed = key_hash(name, ALG_COSIGNATURE_V1, public_key_bytes(key.key.public_key()))
    except (ValueError, binascii.Error):
        raise WitnessFileError(f"{path} is not a witness key (moat witness keygen)") from None
    if hashed.hex() != hash_hex:
        raise WitnessFileError(f"{path}: the key hash does not match its name and key")
    return key


def read_state(path: Path) -> dict[str, Any]:
    """The state: ``{origin: {"size", "root", "checkpoint"}}``; none yet is ``{}``."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WitnessFileError(f"cannot read the state file {path}: {exc}") from None
    origins = data.get("origins") if isinstance(data, dict) else None
    if not isinstance(origins, dict):
        raise WitnessFileError(f"{path} is not a witness state file")
    return origins


def last_cosigned(state: dict[str, Any], origin: str) -> Checkpoint | None:
    """The checkpoint the state says was last cosigned for ``origin``, if any."""
    entry = state.get(origin)
    if entry is None:
        return None
    try:
        checkpoint = parse_checkpoint(entry["checkpoint"])
    except (KeyError, TypeError, NoteError) as exc:
        raise WitnessFileError(f"the state of {origin} is not a checkpoint: {exc}") from None
    if checkpoint.origin != origin:
        raise WitnessFileError(f"the state of {origin} holds {checkpoint.origin}'s checkpoint")
    return checkpoint


def write_state(path: Path, state: dict[str, Any], checkpoint: Checkpoint, body: str) -> None:
    """The state with ``checkpoint`` as its origin's last cosigned, written atomically."""
    entry = {
        "size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root).decode(),
        "checkpoint": body,
    }
    document = {"origins": {**state, checkpoint.origin: entry}}
    write_private(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
