"""Writing an evidence bundle from the gateway (docs/transparency-log.md, "The evidence
bundle"): the latest checkpoint, the keys, then the log's entries a page at a time, each
object written as it comes (nothing is held but one page), with an inclusion proof in that
checkpoint; and, exported from a tree size with a kept checkpoint, the consistency of that
checkpoint into this one."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from schemas.settings import MoatSettings
from schemas.translog import NoteError, parse_checkpoint, parse_vkey, split_note

PAGE = 200
HINTS = {
    "log_checkpoint_not_found": "the log has no checkpoint yet: wait for its schedule, or an "
    "operator runs `moat log checkpoint`",
    "scope_missing": "the key needs log:read and outputs:read: moat api-key create TENANT "
    "--scope log:read --scope outputs:read",
}
README = """\
An evidence bundle of a Moat tenant's transparency log (docs/transparency-log.md).

checkpoint        the log's signed checkpoint (C2SP signed note) the proofs lead to,
                  with witnesses' cosignature lines
log.vkey          the log's verifier key; compare it with the one you were given
witnesses/*.vkey  witnesses' verifier keys; compare them with the ones you trust
jwks.json         the public keys of the manifests' JWS signatures
entries.jsonl     one leaf a line, in index order: kind, id, leaf (hex SHA-256 of the
                  object's bytes), object (its file here), proof (RFC 9162 inclusion
                  proof in checkpoint); "missing" says why an object is absent
objects/          the logged bytes: manifest files as stored, receipts as RFC 8785 JSON
consistency.json  when present: an earlier checkpoint and the RFC 9162 consistency proof
                  of it into checkpoint

Verify, fetching nothing:
    moat evidence verify THIS_DIR [--checkpoint EARLIER] [--witness VKEY --min-witnesses K]
Check: the log's Ed25519 signature on checkpoint; each trusted witness's cosignature; for
each entry, SHA-256(object) == leaf and the inclusion proof of SHA-256(0x00 || leaf) leads
to the checkpoint's root; each manifest's JWS with jwks.json; indices without a gap up to
the checkpoint's size; consistency with the earlier checkpoint. "expired by retention" is
a manifest retention removed after its period: its leaf still proves it existed.
"""


@dataclass(frozen=True)
class Since:
    """Where the export starts: a leaf index (a tree size) or an ISO 8601 time."""

    size: int | None = None
    time: str | None = None

    @classmethod
    def parse(cls, text: str) -> Since:
        if text.isdigit():
            return cls(size=int(text))
        from datetime import datetime

        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"--since {text!r} is neither a tree size nor an ISO time") from None
        return cls(time=text)


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def write_keys(settings: MoatSettings, out: Path, witnesses: list[str]) -> str:
    """The checkpoint, log.vkey, witnesses/, jwks.json and README.txt; the checkpoint."""
    from starter.cli import tenant_api

    note = tenant_api.request(settings, "GET", "/v1/log/checkpoint", hints=HINTS).text
    vkey = tenant_api.request(settings, "GET", "/v1/log/key").text.strip()
    jwks = tenant_api.request(settings, "GET", "/.well-known/jwks.json").content
    _write(out / "checkpoint", note)
    _write(out / "log.vkey", vkey + "\n")
    (out / "witnesses").mkdir(parents=True, exist_ok=True)
    for witness in witnesses:
        _write(out / "witnesses" / f"{parse_vkey(witness).name}.vkey", witness.strip() + "\n")
    _write(out / "jwks.json", jwks)
    _write(out / "README.txt", README)
    return note


def size_of(note: str) -> int:
    try:
        body, _ = split_note(note)
        return parse_checkpoint(body).size
    except NoteError as exc:
        raise ValueError(f"the gateway's checkpoint is not a signed checkpoint: {exc}") from None


def write_entry(out: Path, lines: IO[str], entry: dict[str, Any]) -> None:
    """One entry: its object file (when the store has it) and its entries.jsonl line."""
    kind, ident = entry["kind"], str(entry["id"])
    if kind not in ("manifest", "receipt"):
        raise ValueError(f"entry {entry['index']} is of no kind the log has: {kind!r}")
    line: dict[str, Any] = {"index": entry["index"], "kind": kind, "id": ident}
    line |= {"leaf": entry["leaf"], "object": None}
    if entry.get("object") is not None:
        if "/" in ident or ident.startswith("."):
            raise ValueError(f"entry {entry['index']} has an id no file may be named: {ident!r}")
        relative = f"objects/{kind}s/{ident}.json"
        try:
            _write(out / relative, base64.b64decode(entry["object"], validate=True))
        except binascii.Error:
            raise ValueError(f"entry {entry['index']}: its object is not base64") from None
        line["object"] = relative
    else:
        line["missing"] = entry.get("missing") or "deleted"
    line["proof"] = entry["proof"]
    lines.write(json.dumps(line) + "\n")


def consistency(settings: MoatSettings, out: Path, since: int, size: int) -> bool:
    """consistency.json from the kept checkpoint of size ``since``, if there is one."""
    from starter.cli import tenant_api

    if not 0 < since < size:
        return False
    earlier = _optional_text(settings, f"/v1/log/checkpoints/{since}")
    if earlier is None:
        return False
    proof = tenant_api.call(
        settings, "GET", "/v1/log/proof/consistency", params={"from": since, "to": size}
    )
    document = {"from_checkpoint": earlier, "proof": proof["proof"]}
    _write(out / "consistency.json", json.dumps(document, indent=2) + "\n")
    return True


def _optional_text(settings: MoatSettings, path: str) -> str | None:
    """The gateway's text answer at ``path``, or None when it has none (404)."""
    import httpx

    from starter.cli import identity, tenant_api

    url = identity.gateway_url(settings).value or settings.local_gateway_url
    key = tenant_api.key_of(settings).value
    try:
        answer = httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None
