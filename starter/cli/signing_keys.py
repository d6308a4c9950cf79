"""``moat signing-key``: the keyring that signs run manifests (rotate, publish the public
JWK Set, list). ``moat keys`` is a hidden alias, kept for one release."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from starter.cli.identity import Local
from starter.cli.manifests import UNREADABLE, keyring_path, stop
from starter.cli.output import out
from starter.devstack.ports import local_settings
from store.keyrings.signing import Keyring

signing_key_app = typer.Typer(no_args_is_help=True, help="Manifest signing keys.")

CREATE_ONE = "create one: moat signing-key rotate"
KID_WIDTH = 43  # a base64url SHA-256 thumbprint: never cut, it is copied into --jwks lookups


class Alg(StrEnum):
    ES256 = "ES256"
    RS256 = "RS256"


@signing_key_app.command("rotate", cls=Local)
def rotate(alg: Annotated[Alg, typer.Option("--alg", help="Algorithm.")] = Alg.ES256) -> None:
    """Add a signing key and make it active; older keys still verify older manifests.
    Writes the public JWKS (MOAT_JWKS_PATH) as well: publish it before the keyring."""
    settings = local_settings()
    path = settings.signing_keyring_path
    existed = path.exists()
    ring = Keyring.load_or_create(path, alg.value, jwks_path=settings.jwks_file)
    kid = ring.rotate(alg.value) if existed else ring.active_kid
    out.print(
        f"active signing key: {kid} ({alg.value}); {len(ring.keys)} key(s) in {path}; "
        f"public JWKS in {settings.jwks_file}",
        soft_wrap=True,
    )


@signing_key_app.command("publish", cls=Local)
def publish() -> None:
    """Write the keyring's public JWKS (MOAT_JWKS_PATH), which the gateway serves, without
    rotating: e.g. for a keyring made before the JWKS file existed."""
    settings = local_settings()
    path = settings.signing_keyring_path
    if not path.exists():
        raise stop(
            f"no signing keyring at {path}", UNREADABLE, "create one: moat signing-key rotate"
        )
    ring = Keyring.load(path, settings.jwks_file)
    written = ring.publish()
    out.print(f"public JWKS of {len(ring.keys)} key(s) written to {written}", soft_wrap=True)


@signing_key_app.command("list", cls=Local)
def list_keys() -> None:
    """The keyring's keys (public view)."""
    path = keyring_path()
    if not path.exists():
        raise stop(
            f"no signing keyring at {path}", UNREADABLE, "create one: moat signing-key rotate"
        )
    ring = Keyring.load(path)
    table = Table("active", "alg", "created")
    table.add_column("kid", no_wrap=True, min_width=KID_WIDTH)
    for key in ring.keys:
        active = "*" if key.kid == ring.active_kid else ""
        created = key.created_at.strftime("%Y-%m-%d %H:%M:%SZ")
        table.add_row(active, key.alg, created, key.kid)
    out.print(table)
