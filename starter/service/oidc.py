"""The console's OpenID Connect relying party: a person signs in at the tenant's OpenID
provider and is let in as the tenant's person that provider's subject names.

The flow is the authorization code flow with PKCE (S256), ``state`` and ``nonce``. The
provider's endpoints come from its discovery document (cached), and every call goes to the
issuer's own origin only: a discovery document naming endpoints elsewhere is refused. The
ID token is checked before anything is believed: its signature against the issuer's JWKS,
``iss``, ``aud`` (and ``azp`` with several audiences), ``exp`` and ``iat`` with a small
leeway, and the ``nonce`` of this browser's sign-in. The person is then looked up by
(issuer, ``sub``) in the tenant the browser named; an unknown or disabled person is
refused, and no session is opened.

What a browser carries between leaving for the provider and coming back (``Transient``) is
signed with a key derived from the client secret, so it cannot be altered or forged."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, JoseError
from joserfc.jwk import KeySet
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.errors import ErrorCode
from schemas.people import Person
from schemas.settings import MoatSettings
from starter.service import people
from starter.service.errors import MoatError
from store import tenancy

# Clock skew allowed on ``exp`` and ``iat``.
LEEWAY_SECONDS = 60
# How long a browser may take at the provider.
TRANSIENT_SECONDS = 600
DISCOVERY_TTL_SECONDS = 3600
ALGORITHMS = ("RS256", "ES256", "PS256")
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri")
_TIMEOUT = httpx.Timeout(10.0)


def sign_in_refused(message: str, reason: str) -> MoatError:
    """A sign-in refused: said to the person, with no session opened."""
    return MoatError(ErrorCode.UNAUTHENTICATED, message, {"reason": reason})


@dataclass(frozen=True)
class Discovery:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    token_auth_methods: tuple[str, ...]


@dataclass(frozen=True)
class Transient:
    """What the browser carries to the provider and back (a signed cookie)."""

    tenant_id: str
    state: str
    nonce: str
    verifier: str
    next_path: str
    expires: int = field(default_factory=lambda: int(time.time()) + TRANSIENT_SECONDS)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def challenge(verifier: str) -> str:
    """PKCE's S256 code challenge of ``verifier``."""
    return _b64(hashlib.sha256(verifier.encode()).digest())


def same_origin(url: str, issuer: str) -> bool:
    a, b = urlsplit(url), urlsplit(issuer)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


class RelyingParty:
    """The console's client at its OpenID provider (``console_oidc_*`` settings), with the
    provider's discovery document and JWKS cached."""

    def __init__(self, settings: MoatSettings) -> None:
        assert settings.console_oidc_issuer and settings.console_oidc_client_id
        assert settings.console_oidc_client_secret is not None
        self.issuer = settings.console_oidc_issuer.rstrip("/")
        self.client_id = settings.console_oidc_client_id
        self._secret = settings.console_oidc_client_secret.get_secret_value()
        self.scopes = settings.console_oidc_scopes
        self._sealing = hashlib.sha256(b"moat console oidc transient\0" + self._secret.encode())
        self._discovery: tuple[float, Discovery] | None = None
        self._jwks: KeySet | None = None

    @classmethod
    def of(cls, settings: MoatSettings) -> RelyingParty | None:
        """The relying party, or None: sign-in with OpenID Connect is off (no issuer)."""
        return cls(settings) if settings.console_oidc_issuer else None

    # --- the browser's round trip -------------------------------------------------------

    async def begin(self, tenant_id: str, redirect_uri: str, next_path: str) -> tuple[str, str]:
        """Where to send the browser, and the signed transient state it carries back."""
        found = await self.discovery()
        transient = Transient(
            tenant_id=tenant_id,
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            verifier=secrets.token_urlsafe(48),
            next_path=next_path,
        )
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(self.scopes),
            "state": transient.state,
            "nonce": transient.nonce,
            "code_challenge": challenge(transient.verifier),
            "code_challenge_method": "S256",
        }
        return f"{found.authorization_endpoint}?{urlencode(query)}", self.seal(transient)

    def seal(self, transient: Transient) -> str:
        body = _b64(json.dumps(asdict(transient), separators=(",", ":")).encode())
        return f"{body}.{_b64(hmac.new(self._sealing.digest(), body.encode(), 'sha256').digest())}"

    def unseal(self, sealed: str | None, now: float | None = None) -> Transient:
        """The transient state a browser brought back, or a refusal (absent, altered,
        expired)."""
        body, _, mac = (sealed or "").partition(".")
        expected = _b64(hmac.new(self._sealing.digest(), body.encode(), "sha256").digest())
        if not body or not hmac.compare_digest(mac, expected):
            raise sign_in_refused(
                "This browser did not start this sign-in (its sign-in cookie is missing or "
                "was altered), so it was refused. Start again from the sign-in page.",
                "transient_missing",
            )
        transient = Transient(**json.loads(_unb64(body)))
        if transient.expires < (now or time.time()):
            raise sign_in_refused(
                "The sign-in took too long and expired. Start again from the sign-in page.",
                "transient_expired",
            )
        return transient

    async def finish(
        self, transient: Transient, state: str, code: str, redirect_uri: str
    ) -> dict[str, Any]:
        """The checked ID token's claims for the provider's answer (``state``, ``code``)."""
        if not state or not hmac.compare_digest(state, transient.state):
            raise sign_in_refused(
                "The provider's answer does not belong to the sign-in this browser started "
                "(its state differs), so it was refused. Start again from the sign-in page.",
                "state_mismatch",
            )
        if not code:
            raise sign_in_refused("The provider sent no authorization code.", "no_code")
        id_token = await self._exchange(code, transient.verifier, redirect_uri)
        return await self.verify(id_token, transient.nonce)

    # --- the provider -------------------------------------------------------------------

    async def discovery(self) -> Discovery:
        if self._discovery is not None and self._discovery[0] > time.monotonic():
            return self._discovery[1]
        document = await self._get(f"{self.issuer}/.well-known/openid-configuration")
        if document.get("issuer") != self.issuer:
            raise sign_in_refused(
                "The OpenID provider's discovery document names another issuer than the one "
                "configured; sign-in is refused until the configuration matches.",
                "issuer_mismatch",
            )
        endpoints = [document.get(k) for k in ENDPOINTS]
        if not all(isinstance(e, str) and same_origin(e, self.issuer) for e in endpoints):
            raise sign_in_refused(
                "The OpenID provider's discovery document names endpoints outside the "
                "issuer's origin; the console calls only the issuer.",
                "endpoint_elsewhere",
            )
        methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        found = Discovery(
            issuer=self.issuer,
            authorization_endpoint=document["authorization_endpoint"],
            token_endpoint=document["token_endpoint"],
            jwks_uri=document["jwks_uri"],
            token_auth_methods=tuple(str(m) for m in methods),
        )
        self._discovery = (time.monotonic() + DISCOVERY_TTL_SECONDS, found)
        return found

    async def _get(self, url: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
                answer = await http.get(url, headers={"Accept": "application/json"})
            answer.raise_for_status()
            data = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise unreachable(url, exc) from None
        if not isinstance(data, dict):
            raise unreachable(url, ValueError("not a JSON object"))
        return data

    async def _exchange(self, code: str, verifier: str, redirect_uri: str) -> str:
        found = await self.discovery()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        headers = {"Accept": "application/json"}
        if "client_secret_basic" in found.token_auth_methods:
            # RFC 6749 2.3.1: id and secret form-encoded, then Basic.
            pair = f"{quote(self.client_id, safe='')}:{quote(self._secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif "client_secret_post" in found.token_auth_methods:
            form |= {"client_id": self.client_id, "client_secret": self._secret}
        else:
            raise sign_in_refused(
                "The OpenID provider takes neither client_secret_basic nor client_secret_post "
                "at its token endpoint.",
                "no_client_auth",
            )
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
                answer = await http.post(found.token_endpoint, data=form, headers=headers)
            token = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise unreachable(found.token_endpoint, exc) from None
        if answer.status_code != 200 or not isinstance(token.get("id_token"), str):
            error = token.get("error", answer.status_code) if isinstance(token, dict) else "?"
            raise sign_in_refused(
                f"The OpenID provider refused the sign-in's code ({error}). Start again from "
                "the sign-in page.",
                "token_refused",
            )
        id_token: str = token["id_token"]
        return id_token

    async def keys(self, refresh: bool = False) -> KeySet:
        if self._jwks is None or refresh:
            found = await self.discovery()
            try:
                self._jwks = KeySet.import_key_set(await self._get(found.jwks_uri))  # type: ignore[arg-type]
            except (JoseError, ValueError, KeyError) as exc:
                raise unreachable(found.jwks_uri, exc) from None
        return self._jwks

    async def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims once every check holds; the JWKS is read again once when
        the token names a key not in it (the provider rotated its keys)."""
        try:
            token = jwt.decode(id_token, await self.keys(), algorithms=list(ALGORITHMS))
        except (JoseError, ValueError) as first:
            if not _unknown_key(first):
                raise bad_token(first) from None
            try:
                token = jwt.decode(id_token, await self.keys(True), algorithms=list(ALGORITHMS))
            except (JoseError, ValueError) as exc:
                raise bad_token(exc) from None
        return check_claims(dict(token.claims), self.issuer, self.client_id, nonce)

    # --- the person ---------------------------------------------------------------------

    async def person(
        self,
        sessions: async_sessionmaker[AsyncSession],
        tenant_id: str,
        claims: dict[str, Any],
    ) -> Person:
        """The tenant's enabled person the claims' subject names, or a refusal that does
        not tell whether the tenant exists."""
        async with tenancy.tenant_transaction(sessions, tenant_id) as session:
            found = await people.find_by_oidc(session, tenant_id, self.issuer, claims["sub"])
        if found is None:
            raise sign_in_refused(
                f"No person of tenant {tenant_id!r} signs in with this account. Ask the "
                "tenant's admin to add you (`moat people add HANDLE --oidc-issuer ISSUER "
                "--oidc-subject SUBJECT`), or check the tenant you named.",
                "unknown_subject",
            )
        if found.disabled_at is not None:
            raise sign_in_refused(
                f"Your access to tenant {tenant_id!r} ({found.actor}) was disabled; ask the "
                "tenant's admin.",
                "person_disabled",
            )
        return found


def check_claims(
    claims: dict[str, Any], issuer: str, client_id: str, nonce: str, now: int | None = None
) -> dict[str, Any]:
    """``claims`` when they are the ID token of this sign-in: issued by ``issuer`` for
    ``client_id``, current, and carrying ``nonce``; else a refusal naming what is wrong."""
    registry = jwt.JWTClaimsRegistry(
        now=now,
        leeway=LEEWAY_SECONDS,
        iss={"essential": True, "value": issuer},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise sign_in_refused(
            "The provider's ID token has expired. Sign in again.", "expired"
        ) from None
    except JoseError as exc:
        raise bad_token(exc) from None
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences
    if not isinstance(audiences, list) or client_id not in audiences:
        raise bad_token(ValueError("the ID token was issued for another client (aud)"))
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise bad_token(ValueError("the ID token's authorized party (azp) is another client"))
    presented = claims.get("nonce")
    if not isinstance(presented, str) or not hmac.compare_digest(presented, nonce):
        raise bad_token(ValueError("the ID token's nonce is not this sign-in's"))
    return claims


def _unknown_key(error: Exception) -> bool:
    return "key" in type(error).__name__.lower() or "kid" in str(error).lower()


def bad_token(error: Exception) -> MoatError:
    said = getattr(error, "description", None) or str(error)
    claim = getattr(error, "claim", None)
    said = f"{claim}: {said}" if claim else said
    return sign_in_refused(
        f"The provider's ID token did not pass the console's checks ({said}), so you were "
        "not signed in. Start again from the sign-in page.",
        "id_token_invalid",
    )


def unreachable(url: str, error: Exception) -> MoatError:
    return MoatError(
        ErrorCode.UNAVAILABLE,
        f"The OpenID provider did not answer as expected at {url} ({type(error).__name__}); "
        "try again in a moment.",
        {"reason": "provider_unavailable"},
    )
