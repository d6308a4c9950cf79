"""Manifest signing keys and detached JWS.

A signature is a JWS Compact Serialization with a detached payload (RFC 7515 Appendix F):
``BASE64URL(header) + ".." + BASE64URL(signature)``. The protected header is exactly
``{"alg", "kid"}``, ``kid`` being the key's RFC 7638 thumbprint, and the payload is
base64url-encoded in the signing input as in any JWS (no RFC 7797 ``b64: false``). So any
JWS library verifies a manifest: re-insert ``BASE64URL(signing_input)`` between the dots.
Registered header names only: strict libraries refuse private ones.

The keyring is a JSON file (mode 0600, replaced atomically under a lock) of private JWKs.
Rotation adds a key and makes it active; old keys stay so older manifests still verify.
Whoever creates or rotates the keyring also writes its public JWK Set (``jwks_path``): the
gateway serves that file and never needs the private keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, RSAKey
from pydantic import ValidationError

from schemas.manifest import MANIFEST_SCOPE, Algorithm, RunManifest, Signature, signing_input
from schemas.settings import MoatSettings
from store.keyrings.files import locked, replace_json

_KEY_TYPES: dict[str, tuple[type[ECKey] | type[RSAKey], str]] = {
    "ES256": (ECKey, "EC"),
    "RS256": (RSAKey, "RSA"),
}
_PUBLIC_MEMBERS = ("kty", "crv", "x", "y", "n", "e")
# Members that only a private (or symmetric) JWK carries (RFC 7518 section 6).
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


class VerificationError(Exception):
    """A signature could not be accepted."""


class MalformedError(VerificationError):
    """Not a detached JWS, or not a manifest: nothing to verify."""


class UnknownKeyError(VerificationError):
    """Signed by a key the given JWKS does not hold."""


class BadSignatureError(VerificationError):
    """The signature does not match the content (tampered), or there is none."""


class KeyringMissingError(FileNotFoundError):
    """A keyring that must be provided (mounted) is not there; nothing creates it silently."""


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: Algorithm
    created_at: datetime
    jwk: ECKey | RSAKey

    def public_jwk(self) -> dict[str, Any]:
        members = self.jwk.as_dict(private=False)
        public = {k: members[k] for k in _PUBLIC_MEMBERS if k in members}
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}


def _generate(alg: Algorithm) -> SigningKey:
    if alg == "ES256":
        key: ECKey | RSAKey = ECKey.generate_key("P-256", parameters={"alg": alg, "use": "sig"})
    else:
        key = RSAKey.generate_key(2048, parameters={"alg": alg, "use": "sig"})
    kid = key.thumbprint()
    key.ensure_kid()
    return SigningKey(kid=kid, alg=alg, created_at=datetime.now(UTC), jwk=key)


def _import(entry: Mapping[str, Any]) -> SigningKey:
    alg = entry["alg"]
    if alg not in _KEY_TYPES:
        raise ValueError(f"keyring: unsupported algorithm {alg!r}")
    key = _KEY_TYPES[alg][0].import_key(entry["jwk"])
    if key.thumbprint() != entry["kid"]:
        raise ValueError(f"keyring: kid {entry['kid']!r} is not its key's thumbprint")
    created = datetime.fromisoformat(entry["created_at"])
    return SigningKey(kid=entry["kid"], alg=alg, created_at=created, jwk=key)


class Keyring:
    """Private signing keys, one of them active. Build with ``load``, ``load_or_create`` or
    ``from_settings``.

    With a ``jwks_path``, every change of the keyring also writes its public JWK Set there."""

    def __init__(
        self,
        path: Path,
        keys: list[SigningKey],
        active_kid: str,
        jwks_path: Path | None = None,
    ) -> None:
        if active_kid not in {k.kid for k in keys}:
            raise ValueError(f"keyring: active kid {active_kid!r} is not in the keyring")
        self.path = path
        self.jwks_path = jwks_path
        self._keys = list(keys)
        self._active = active_kid

    @classmethod
    def load(cls, path: Path, jwks_path: Path | None = None) -> Keyring:
        """The keyring at ``path``; ``FileNotFoundError`` when there is none. Reads only:
        works on a read-only mount."""
        ring = json.loads(path.read_text())
        return cls(path, [_import(entry) for entry in ring["keys"]], ring["active"], jwks_path)

    @classmethod
    def load_or_create(
        cls, path: Path, alg: Algorithm = "ES256", *, jwks_path: Path | None = None
    ) -> Keyring:
        """The keyring at ``path``, created with one ``alg`` key if missing. A ``jwks_path``
        that does not exist yet is written from an existing keyring too."""
        with locked(path):
            if path.exists():
                ring = cls.load(path, jwks_path)
                if jwks_path is not None and not jwks_path.exists():
                    ring._publish()
                return ring
            key = _generate(alg)
            ring = cls(path, [key], key.kid, jwks_path)
            ring._save()
            return ring

    @classmethod
    def from_settings(cls, settings: MoatSettings) -> Keyring:
        """The keyring that signs a worker's manifests. A configured one
        (``MOAT_SIGNING_KEYRING``, e.g. a mounted secret shared by every worker) must exist:
        a worker minting a key of its own would sign manifests nobody can verify. Only the
        development default under ``MOAT_HOME`` is created on first use, with its public JWK
        Set beside it for the gateway."""
        path = settings.signing_keyring
        if path is not None:
            if not path.exists():
                raise KeyringMissingError(
                    f"MOAT_SIGNING_KEYRING points at {path}, which does not exist; create the "
                    "keyring with `moat signing-key rotate` (or its old name, `moat keys "
                    "rotate`) and mount it on every worker"
                )
            return cls.load(path)  # only read: a read-only mount is enough
        return cls.load_or_create(settings.signing_keyring_path, jwks_path=settings.jwks_file)

    @property
    def active_kid(self) -> str:
        return self._active

    @property
    def keys(self) -> tuple[SigningKey, ...]:
        return tuple(self._keys)

    def rotate(self, alg: Algorithm = "ES256") -> str:
        """Add a new ``alg`` key and make it active; returns its kid. Re-reads the file under
        the lock first, so a concurrent rotation is not lost."""
        with locked(self.path):
            if self.path.exists():
                current = Keyring.load(self.path)
                self._keys, self._active = current._keys, current._active
            key = _generate(alg)
            self._keys.append(key)
            self._active = key.kid
            self._save()
        return key.kid

    def jwks(self) -> dict[str, Any]:
        """The public JWK Set (RFC 7517) of every key, active one first."""
        ordered = sorted(self._keys, key=lambda k: k.kid != self._active)
        return {"keys": [k.public_jwk() for k in ordered]}

    def publish(self) -> Path:
        """(Re)write the public JWK Set at ``jwks_path``; returns the path."""
        if self.jwks_path is None:
            raise ValueError("keyring: no jwks_path to publish to")
        with locked(self.path):
            self._publish()
        return self.jwks_path

    def _publish(self) -> None:
        if self.jwks_path is not None:
            replace_json(self.jwks_path, self.jwks(), 0o644)

    def sign_detached(self, payload: bytes) -> str:
        """Compact JWS of ``payload`` with the active key, payload part left empty."""
        key = next(k for k in self._keys if k.kid == self._active)
        compact = jws.serialize_compact(
            {"alg": key.alg, "kid": key.kid}, payload, key.jwk, algorithms=[key.alg]
        )
        return jws.detach_content(compact)

    def _save(self) -> None:
        # The public set first: a key is published before anything can sign with it.
        self._publish()
        ring = {
            "active": self._active,
            "keys": [
                {
                    "kid": k.kid,
                    "alg": k.alg,
                    "created_at": k.created_at.isoformat(),
                    "jwk": k.jwk.as_dict(private=True),
                }
                for k in self._keys
            ],
        }
        replace_json(self.path, ring, 0o600)


def public_jwks(document: Any) -> dict[str, Any]:
    """A JWK Set reduced to public members, for serving. Refuses (``MalformedError``)
    anything that is not a set of EC/RSA public keys with a kid, and any key carrying private
    material, so a private keyring given by mistake is never served."""
    keys = []
    for jwk in _jwks_keys(document):
        if _PRIVATE_MEMBERS & jwk.keys():
            raise MalformedError("the JWK Set holds private key material; publish public keys only")
        if jwk.get("kty") not in ("EC", "RSA") or not isinstance(jwk.get("kid"), str):
            raise MalformedError("not a JWK Set of public EC or RSA keys with a kid")
        members = (*_PUBLIC_MEMBERS, "kid", "alg", "use")
        keys.append({k: jwk[k] for k in members if k in jwk})
    return {"keys": keys}


class PublishedJwks:
    """The public JWK Set file a gateway serves, parsed again only when the file changes
    (a new inode, modification time or size: an atomic replace, or a remounted secret)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._document: dict[str, Any] = {"keys": []}

    def current(self) -> dict[str, Any]:
        """The set as last written; ``FileNotFoundError`` when there is none yet,
        ``MalformedError`` when the file is not a public JWK Set."""
        st = os.stat(self.path)
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if seen != self._seen:
            try:
                document = json.loads(self.path.read_bytes())
            except ValueError as exc:
                raise MalformedError(f"the JWKS file is not JSON: {exc}") from None
            self._document, self._seen = public_jwks(document), seen
        return self._document


def _jwks_keys(jwks: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
    if not isinstance(keys, list) or not all(isinstance(k, Mapping) for k in keys):
        raise MalformedError("not a JWK Set: no 'keys' list of objects")
    return keys


def protected_header(compact: str) -> dict[str, Any]:
    """The protected header of a detached compact JWS, NOT verified."""
    parts = compact.split(".")
    if len(parts) != 3 or parts[1] != "":
        raise MalformedError("not a detached compact JWS ('header..signature')")
    try:
        obj = jws.extract_compact(compact.encode(), payload=b"")
    except (JoseError, ValueError) as exc:
        raise MalformedError(f"unreadable JWS header: {exc}") from None
    return dict(obj.headers())


def verify_detached(compact: str, payload: bytes, jwks: Mapping[str, Any]) -> str:
    """Verify a detached compact JWS over ``payload`` with the key ``jwks`` names by the
    header's kid; returns the kid. Only ES256 and RS256, only keys of the matching type."""
    header = protected_header(compact)
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in _KEY_TYPES or not isinstance(kid, str) or header.keys() - {"alg", "kid"}:
        raise MalformedError(f"unexpected protected header {header!r}")
    jwk = next((k for k in _jwks_keys(jwks) if k.get("kid") == kid), None)
    if jwk is None:
        raise UnknownKeyError(f"no key {kid!r} in the JWKS")
    key_class, kty = _KEY_TYPES[alg]
    if jwk.get("kty") != kty or jwk.get("alg", alg) != alg:
        raise BadSignatureError(f"key {kid!r} is not an {alg} key")
    try:
        key = key_class.import_key({k: v for k, v in jwk.items() if k != "d"})
        jws.deserialize_compact(compact, key, algorithms=[alg], payload=payload)
    except JoseError as exc:
        raise BadSignatureError(f"signature by {kid!r} does not verify: {exc}") from None
    return kid


def sign_manifest(
    manifest: RunManifest,
    keyring: Keyring,
    signer: str = "moat",
    *,
    scope: list[str] | None = None,
    signed_at: datetime | None = None,
) -> RunManifest:
    """A copy of ``manifest`` with one more signature, by the keyring's active key."""
    key = next(k for k in keyring.keys if k.kid == keyring.active_kid)
    signature = Signature(
        signer=signer,
        algorithm=key.alg,
        signature=keyring.sign_detached(signing_input(manifest)),
        signed_at=signed_at or datetime.now(UTC),
        scope=list(scope or MANIFEST_SCOPE),
        kid=key.kid,
    )
    return manifest.model_copy(update={"signatures": [*manifest.signatures, signature]})


def verify_manifest(
    manifest: RunManifest | Mapping[str, Any], jwks: Mapping[str, Any]
) -> list[str]:
    """Verify every signature over ``signing_input``; returns their kids in order.

    A mapping (a parsed file) is verified as is. ``MalformedError``: not a manifest.
    ``BadSignatureError``: unsigned, tampered, or a signature entry whose ``algorithm`` or
    ``kid`` disagrees with its protected header. ``UnknownKeyError``: key not in ``jwks``.
    """
    _jwks_keys(jwks)
    if isinstance(manifest, RunManifest):
        model, document = manifest, manifest.model_dump(mode="json")
    else:
        try:
            model, document = RunManifest.model_validate(manifest), dict(manifest)
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            raise MalformedError(f"not a run manifest: {'; '.join(problems[:3])}{more}") from None
    try:
        payload = signing_input(document)
    except ValueError as exc:
        raise MalformedError(f"not canonicalizable (RFC 8785): {exc}") from None
    if not model.signatures:
        raise BadSignatureError("the manifest is unsigned")
    kids = []
    for i, entry in enumerate(model.signatures):
        try:
            header = protected_header(entry.signature)
            if (header.get("alg"), header.get("kid")) != (entry.algorithm, entry.kid):
                raise BadSignatureError(f"signature {i}: entry disagrees with its JWS header")
            kids.append(verify_detached(entry.signature, payload, jwks))
        except MalformedError as exc:
            raise BadSignatureError(f"signature {i}: {exc}") from None
    return kids
