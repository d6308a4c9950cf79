"""A GitHub App connection's installation access token: minted with the App's JWT (RS256,
``iat`` a minute back for clock drift, ``exp`` nine minutes on, ``iss`` the App's id) by
``POST /app/installations/{installation_id}/access_tokens``, kept sealed in
``connection_tokens`` until a minute before its ``expires_at`` and shared by every worker
(``store.connection_tokens.current``: one mint at a time across processes).

GitHub's 404 (the installation is gone) and 403 (the App or installation is suspended) are
refusals for good: the connection is marked ``needs_reauth`` and its calls are refused
without reaching GitHub until someone connects it again. A 401 is a JWT GitHub does not
accept (a wrong key, a wrong App id): a plain failure saying so.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

import httpx
from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.adapters.base import fail
from activities.adapters.guard import HostGuard
from activities.adapters.reconcile import base_url
from activities.adapters.sender import SendRequest, send
from activities.alerts import Alerter
from activities.connections import refused
from schemas.alerts import AlertKind
from schemas.connections import DEFAULT_BASE_URLS, ConnectionType, Credential, holds_github_app
from schemas.errors import ErrorCode
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput
from store import connection_tokens
from store.connection_tokens import Minted, NeedsReauth, Refused, TokenState
from store.keyrings.connections import ConnectionCipher

API_VERSION = "2022-11-28"
DRIFT_SECONDS = 60  # ``iat`` this far back, as GitHub advises against clock drift
JWT_SECONDS = 540  # ``exp`` - ``iat`` = 10 minutes, GitHub's most
GONE = (
    "GitHub says the App's installation {installation} is gone (uninstalled, or not this "
    "App's): install the App again and add a connection with the new installation id"
)
SUSPENDED = (
    "GitHub refused to mint a token: the App or its installation {installation} is "
    "suspended; lift the suspension in GitHub's settings, then connect it again"
)


def app_jwt(app_id: int, private_key_pem: str, now: float | None = None) -> str:
    """The App's JWT, as GitHub documents it (RS256; ``iss`` the App's id)."""
    issued = int(now if now is not None else time.time()) - DRIFT_SECONDS
    claims = {"iat": issued, "exp": issued + DRIFT_SECONDS + JWT_SECONDS, "iss": str(app_id)}
    key = RSAKey.import_key(private_key_pem.strip())
    return jwt.encode({"alg": "RS256", "typ": "JWT"}, claims, key)


Bearer = Callable[[AdapterInput, int | None], Awaitable[tuple[Credential, int]]]


@dataclass(frozen=True)
class AppCredential(Credential):
    """A GitHub App connection as resolved: ``secret`` is empty (an adapter that does not
    know Apps sends nothing of worth); the App's private key stays inside ``bearer``, which
    gives the installation token (as a ``Credential`` to send) and its generation, minted
    again when GitHub refused that generation early."""

    bearer: Bearer | None = field(default=None, repr=False, compare=False)


class GithubAppTokens:
    """Turns a resolved GitHub App connection into an ``AppCredential`` (the resolver's
    ``TokenSource``)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        cipher: ConnectionCipher,
        client: httpx.AsyncClient,
        guard: HostGuard,
        alerter: Alerter | None = None,
    ) -> None:
        self._sessions = sessions
        self._cipher = cipher
        self._client = client
        self._guard = guard
        self._alerter = alerter

    def holds(self, credential: Credential) -> bool:
        return holds_github_app(credential.type, credential.config)

    def wrap(self, tenant_id: str, credential: Credential) -> Credential:
        c = credential
        bearer = partial(self._bearer, tenant_id, c)
        return AppCredential(
            c.connection_id, c.type, "", c.config, c.fingerprint, c.generation, bearer=bearer
        )

    async def _bearer(
        self, tenant_id: str, app: Credential, inp: AdapterInput, refused_generation: int | None
    ) -> tuple[Credential, int]:
        try:
            state = await connection_tokens.current(
                self._sessions,
                self._cipher,
                tenant_id,
                app.connection_id,
                partial(self._mint, app, inp),
                refused_generation=refused_generation,
            )
        except NeedsReauth as err:
            if self._alerter is not None:  # once per connection: the alert's id is its id
                await self._alerter.hand_off(
                    tenant_id, AlertKind.CONNECTION_NEEDS_REAUTH, app.connection_id
                )
            raise refused(
                ErrorCode.CONNECTION_NEEDS_REAUTH,
                f"connection {app.connection_id} needs to be connected again: {err.reason}",
                app.connection_id,
            ) from None
        assert state.access_token is not None
        token = Credential(
            app.connection_id, app.type, state.access_token, app.config, app.fingerprint
        )
        return token, state.generation

    async def _mint(self, app: Credential, inp: AdapterInput, _: TokenState) -> Minted:
        installation = int(app.config["installation_id"])
        base = base_url(app, DEFAULT_BASE_URLS[ConnectionType.GITHUB])
        request = SendRequest(
            "POST",
            f"{base}/app/installations/{installation}/access_tokens",
            headers={
                "Authorization": f"Bearer {app_jwt(int(app.config['app_id']), app.secret)}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
            },
            credential=app,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
        )
        answer = await send(self._client, self._guard, request)
        said = answer.said()
        if answer.status == 404:
            raise Refused(GONE.format(installation=installation))
        if answer.status == 403:
            raise Refused(SUSPENDED.format(installation=installation))
        body = answer.json() if answer.status == 201 else None
        if not isinstance(body, dict) or not isinstance(body.get("token"), str):
            detail = said.get("message") if isinstance(said, dict) else None
            raise fail(
                ErrorTaxonomy.PROVIDER_AUTH_FAILURE
                if answer.status == 401
                else ErrorTaxonomy.PROVIDER_SERVER_ERROR,
                f"GitHub refused to mint an installation token for App {app.config['app_id']} "
                f"(HTTP {answer.status}" + (f": {detail}" if detail else "") + "): check "
                "that the connection's app_id and private key are the App's",
                http_status=answer.status,
                retryable=answer.status >= 500,
            )
        return Minted(body["token"], _expires(body.get("expires_at")))


def _expires(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
