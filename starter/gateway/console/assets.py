"""The console's static assets: files of ``static/``, each locked by its SHA-256 in
``static/assets.lock``, served by the gateway at a URL naming its hash
(``/console/static/<hash>/<name>``, ``Cache-Control: immutable``) and referenced with a
Subresource Integrity ``integrity=`` attribute. Nothing is loaded from anywhere else.

The gateway serves only the files the lock names, and refuses to start when a file differs
from its line in the lock: change an asset, then write the lock again with
``python -m starter.gateway.console``.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PREFIX = "/console/static"
LOCK = "assets.lock"
LOCK_HEADER = (
    "# The SHA-256 of every asset the console serves; the gateway refuses a file that differs.\n"
    "# Written by `python -m starter.gateway.console`.\n"
)
TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Asset:
    name: str
    body: bytes
    sha256: str  # hex

    @property
    def url(self) -> str:
        return f"{PREFIX}/{self.sha256[:20]}/{self.name}"

    @property
    def integrity(self) -> str:
        return "sha256-" + base64.b64encode(bytes.fromhex(self.sha256)).decode()

    @property
    def media_type(self) -> str:
        return TYPES[Path(self.name).suffix]


def static_dir() -> Path:
    return Path(str(resources.files("starter.gateway.console") / "static"))


def files(folder: Path | None = None) -> dict[str, bytes]:
    """Every asset file (by its path under ``static/``), the lock left out."""
    root = folder or static_dir()
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK and p.suffix in TYPES
    }


def read_lock(folder: Path | None = None) -> dict[str, str]:
    """The lock: asset name -> SHA-256 (hex)."""
    text = ((folder or static_dir()) / LOCK).read_text()
    locked: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            locked[name.strip()] = digest
    return locked


def lock_text(folder: Path | None = None) -> str:
    lines = [
        f"{hashlib.sha256(body).hexdigest()}  {name}\n" for name, body in files(folder).items()
    ]
    return LOCK_HEADER + "".join(lines)


def load(folder: Path | None = None) -> dict[str, Asset]:
    """The locked assets; ``RuntimeError`` when a file and the lock disagree."""
    found = files(folder)
    locked = read_lock(folder)
    if set(found) != set(locked):
        raise RuntimeError(
            f"The console's asset lock names {sorted(locked)} but static/ holds "
            f"{sorted(found)}: run `python -m starter.gateway.console`."
        )
    assets: dict[str, Asset] = {}
    for name, body in found.items():
        digest = hashlib.sha256(body).hexdigest()
        if digest != locked[name]:
            raise RuntimeError(
                f"The console asset {name} is not the locked one: run "
                "`python -m starter.gateway.console` after changing it."
            )
        assets[name] = Asset(name, body, digest)
    return assets


def main() -> int:
    """Write the lock from the files in ``static/``."""
    (static_dir() / LOCK).write_text(lock_text())
    sys.stdout.write(f"wrote {static_dir() / LOCK}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
