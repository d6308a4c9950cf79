"""``moat manifest``: check run manifests (verify every signature, or inspect one unverified).

``manifest verify`` exits 0 when every signature verifies, 1 when the manifest is
unsigned, tampered or signed by a key the JWKS does not hold, and 2 when the file (or the
JWKS) cannot be read as one; scripts can tell "reject" from "could not check".
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from schemas.manifest import content_digest, parse_document
from schemas.names import MANIFEST_SHA256_HEADER, RUN_ID_HEADER
from starter.cli.identity import AsTenant, Local
from starter.cli.output import err, fail, out
from starter.devstack.ports import local_settings
from store.keyrings.signing import (
    Keyring,
    MalformedError,
    UnknownKeyError,
    VerificationError,
    protected_header,
    verify_manifest,
)

manifest_app = typer.Typer(no_args_is_help=True, help="Fetch, verify and inspect run manifests.")


VALID, REJECTED, UNREADABLE = 0, 1, 2


def keyring_path() -> Path:
    """The local signing keyring (``MOAT_SIGNING_KEYRING``, else under ``MOAT_HOME``)."""
    return local_settings().signing_keyring_path


def stop(message: str, code: int, hint: str | None = None) -> typer.Exit:
    """A check that did not pass (``manifest_rejected``, exit 1) or could not run
    (``unreadable``, exit 2), said as every error is."""
    name = "manifest_rejected" if code == REJECTED else "unreadable"
    return fail(name, message, hint or "see `moat manifest verify --help`", exit_code=code)


def _text(value: Any) -> Text:
    """File content is untrusted: render it literally, never as console markup."""
    return Text(value if isinstance(value, str) else json.dumps(value))


def _read_manifest(file: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        data = file.read_bytes()
        return data, parse_document(data)
    except (OSError, ValueError) as exc:
        raise stop(f"cannot read {file} as a manifest: {exc}", UNREADABLE) from None


def _load_jwks(source: str | None) -> dict[str, Any]:
    try:
        if source is None:
            path = keyring_path()
            if not path.exists():
                raise stop(
                    f"no signing keyring at {path}",
                    UNREADABLE,
                    "pass --jwks FILE|URL (e.g. the gateway's /.well-known/jwks.json)",
                )
            return Keyring.load(path).jwks()
        if source.startswith(("http://", "https://")):
            response = httpx.get(source, timeout=10.0, follow_redirects=False)
            response.raise_for_status()
            value: Any = response.json()
        else:
            value = json.loads(Path(source).read_text())
    except (OSError, ValueError, KeyError, httpx.HTTPError) as exc:
        where = source or "the keyring"
        raise stop(f"cannot load the JWKS from {where}: {exc}", UNREADABLE) from None
    if not isinstance(value, dict):
        raise stop("the JWKS is not a JSON object", UNREADABLE)
    return value


def check_manifest(data: bytes, jwks: Mapping[str, Any]) -> tuple[int, str]:
    """The verdict of ``manifest verify`` on a file's bytes: exit code and message."""
    try:
        document = parse_document(data)
    except ValueError as exc:
        return UNREADABLE, f"not a manifest file: {exc}"
    try:
        kids = verify_manifest(document, jwks)
    except MalformedError as exc:
        return UNREADABLE, str(exc)
    except UnknownKeyError as exc:
        return REJECTED, f"{exc} (is the JWKS the signer's, and current?)"
    except VerificationError as exc:
        return REJECTED, str(exc)
    return VALID, f"{len(kids)} signature(s) by {', '.join(kids)}; {content_digest(document)}"


@manifest_app.command("get", cls=AsTenant)
def get(
    receipt_id: Annotated[str, typer.Argument(help="The receipt's id.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write it to this file. Default: stdout."),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="A replayed run's own manifest.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--verify", help="Verify its signatures with the gateway's public keys."),
    ] = False,
) -> None:
    """Fetch the signed manifest of a receipt from the gateway, byte for byte.

    With --output it is written to a file and the command to verify it is printed; with
    --verify its signatures are checked against the gateway's JWKS at once (exit 1 if any
    fails)."""
    from starter.cli import identity, tenant_api

    settings = local_settings()
    answer = tenant_api.request(
        settings,
        "GET",
        f"/v1/executions/{receipt_id}/manifest",
        params={"run_id": run_id},
    )
    gateway = identity.gateway_url(settings).value or settings.local_gateway_url
    jwks_url = f"{gateway}/.well-known/jwks.json"
    if output is None:
        sys.stdout.buffer.write(answer.content)
        sys.stdout.buffer.flush()
    else:
        try:
            output.write_bytes(answer.content)
        except OSError as exc:
            raise stop(f"cannot write {output}: {exc.strerror or exc}", UNREADABLE) from None
        run = answer.headers.get(RUN_ID_HEADER, "-")
        digest = answer.headers.get(MANIFEST_SHA256_HEADER, "-")
        err.print(f"wrote {output} (run {run}, {digest})", soft_wrap=True, highlight=False)
        if not check:
            err.print(f"verify it: moat manifest verify {output} --jwks {jwks_url}", soft_wrap=True)
    if check:
        code, message = check_manifest(answer.content, _load_jwks(jwks_url))
        if code != VALID:
            raise stop(message, code)
        err.print(f"[bold green]valid[/]: {escape(message)}", soft_wrap=True)


@manifest_app.command("verify", cls=Local)
def verify(
    file: Annotated[Path, typer.Argument(help="A manifest.json.")],
    jwks: Annotated[
        str | None,
        typer.Option("--jwks", help="JWK Set file or URL. Default: the local keyring."),
    ] = None,
) -> None:
    """Verify every signature of a manifest (0 valid, 1 rejected, 2 unreadable)."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise stop(f"cannot read {file}: {exc}", UNREADABLE) from None
    code, message = check_manifest(data, _load_jwks(jwks))
    if code != VALID:
        raise stop(message, code)
    out.print(f"[bold green]valid[/]: {escape(message)}", soft_wrap=True)


def _field(name: str, value: Any, indent: int = 0) -> None:
    """One ``name  value`` line; long values (digests, kids) run on rather than being cut."""
    label = Text(" " * indent + f"{name:<{24 - indent}}", style="bold")
    out.print(Text.assemble(label, _text(value)), soft_wrap=True)


@manifest_app.command("inspect", cls=Local)
def inspect(file: Annotated[Path, typer.Argument(help="A manifest.json.")]) -> None:
    """Show a manifest's identifiers, digests and signature headers, WITHOUT verifying."""
    data, document = _read_manifest(file)
    out.print(
        Panel(
            "UNVERIFIED: shown as read from the file. Check it with `moat manifest verify`.",
            style="bold yellow",
        )
    )
    for name in ("run_id", "tenant_id", "idempotency_key", "executed_at", "inputs_sha"):
        _field(name, document.get(name, "-"))
    _field("file sha256", "sha256:" + hashlib.sha256(data).hexdigest())
    try:
        _field("signed content sha256", content_digest(document))
    except ValueError as exc:
        _field("signed content sha256", f"not canonicalizable: {exc}")
    signatures = document.get("signatures")
    for i, entry in enumerate(signatures if isinstance(signatures, list) else []):
        out.print(f"signature {i}", style="bold")
        entry = entry if isinstance(entry, dict) else {}
        try:
            header: dict[str, Any] = protected_header(str(entry.get("signature", "")))
        except MalformedError as exc:
            header = {"alg": f"unreadable: {exc}", "kid": "-"}
        _field("alg (header)", header.get("alg"), indent=2)
        _field("kid (header)", header.get("kid"), indent=2)
        for label in ("signer", "signed_at", "scope"):
            _field(label + "*", entry.get(label, "-"), indent=2)
    if signatures:
        out.print("[dim]* labels of the entry: the signature covers the content, not them[/]")
    else:
        out.print("[bold red]no signatures[/]")
