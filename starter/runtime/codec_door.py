"""The Temporal Web UI's door to the codec endpoint: a secret of its own, rotated.

The Web UI cannot send an ``Authorization`` header, so the address it is given carries a
token in its path (``/codec/ui/<token>/decode``). The token is nobody else's secret (not
derived from the admin key), opens decoding only, and is rotated with ``moat codec
rotate``: the new token becomes current, the old one is retired and keeps working for a
grace period (an hour by default: a UI only learns a new address when it is restarted or
redeployed, which a planned rotation fits in; a token that leaked is retired with no grace
at all).

The door file (mode 0600, ``MOAT_CODEC_DOOR`` or ``$MOAT_HOME/codec-door.json``) holds the
current token, which ``moat up`` and ``moat codec url`` hand to a UI, and only the SHA-256
of retired ones with when they were retired and until when they are accepted. Gateways read
it on change, so a rotation needs no gateway restart; they never create it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from schemas.settings import MoatSettings
from store.keyrings.files import locked, replace_json

DOOR_FILE = "codec-door.json"
DEFAULT_GRACE = timedelta(hours=1)


def door_path(settings: MoatSettings) -> Path:
    return settings.codec_door or settings.home / DOOR_FILE


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class _Retired:
    sha256: str
    retired_at: datetime
    valid_until: datetime


@dataclass(frozen=True)
class Door:
    """The door file's content."""

    token: str
    created_at: datetime
    retired: tuple[_Retired, ...] = ()

    @classmethod
    def read(cls, path: Path) -> Door:
        raw = json.loads(path.read_text())
        return cls(
            token=raw["current"]["token"],
            created_at=datetime.fromisoformat(raw["current"]["created_at"]),
            retired=tuple(
                _Retired(
                    r["sha256"],
                    datetime.fromisoformat(r["retired_at"]),
                    datetime.fromisoformat(r["valid_until"]),
                )
                for r in raw.get("retired", [])
            ),
        )

    def admits(self, token: str, now: datetime) -> bool:
        """Whether ``token`` is the current one, or a retired one still in its grace period.
        Hashes are compared in constant time, every candidate every time."""
        presented = _digest(token)
        candidates = [_digest(self.token)]
        candidates += [r.sha256 for r in self.retired if now < r.valid_until]
        found = False
        for candidate in candidates:
            found |= hmac.compare_digest(presented, candidate)
        return found

    def as_json(self) -> dict[str, Any]:
        return {
            "current": {"token": self.token, "created_at": self.created_at.isoformat()},
            "retired": [
                {
                    "sha256": r.sha256,
                    "retired_at": r.retired_at.isoformat(),
                    "valid_until": r.valid_until.isoformat(),
                }
                for r in self.retired
            ],
        }


def _new_token() -> str:
    return secrets.token_urlsafe(32)


def _write(path: Path, door: Door) -> None:
    """Replace the file atomically (a gateway never reads half of it), mode 0600."""
    replace_json(path, door.as_json())


def current_token(settings: MoatSettings) -> str:
    """The token of the UI's address. Without ``MOAT_CODEC_DOOR`` the door file is created
    on first use (development); a configured file that is missing is an error."""
    path = door_path(settings)
    if not path.exists():
        if settings.codec_door is not None:
            raise FileNotFoundError(
                f"MOAT_CODEC_DOOR points at {path}, which does not exist; create it with "
                "`moat codec rotate` and give every gateway the same file"
            )
        with locked(path):
            if not path.exists():
                _write(path, Door(_new_token(), datetime.now(UTC)))
    return Door.read(path).token


def rotate(
    settings: MoatSettings, *, grace: timedelta = DEFAULT_GRACE, now: datetime | None = None
) -> str:
    """A new current token; the previous one is accepted for ``grace`` more, then refused.
    Retired tokens past their grace are dropped. Returns the new token."""
    now = now or datetime.now(UTC)
    path = door_path(settings)
    with locked(path):
        retired: list[_Retired] = []
        if path.exists():
            old = Door.read(path)
            retired = [r for r in old.retired if now < r.valid_until]
            retired.append(_Retired(_digest(old.token), now, now + grace))
        token = _new_token()
        _write(path, Door(token, now, tuple(retired)))
    return token


class DoorFile:
    """The gateway's view of the door file: re-read when it changes, never created."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._door: Door | None = None

    def load(self) -> Door | None:
        """The door, or None when there is no door file (the UI door is closed)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen or self._door is None:
            self._door, self._seen = Door.read(self.path), seen
        return self._door
