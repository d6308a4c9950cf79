"""An OAuth 2 connection's access token at the moment of the adapter call: read when fresh,
else minted at the provider's token endpoint once across every process
(``store.connection_tokens.current``), by a bounded request through the host guard.

A refresh token's grant (``refresh_token``) or the client's own (``client_credentials``)
is presented with the client secret the connection seals. ``invalid_grant`` (and a
provider's like refusals) is a refusal for good: the connection is marked ``needs_reauth``
and every call after it is refused at once (``connection_needs_reauth``) until a person
connects it again. Any other failure leaves everything as it was: the attempt fails
retryably and the next one tries again."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail
from activities.adapters.guard import HostGuard
from activities.adapters.sender import SendRequest, send
from activities.alerts import Alerter
from activities.connections import refused
from schemas import oauth
from schemas.alerts import AlertKind
from schemas.errors import ErrorCode
from schemas.records import ErrorTaxonomy
from store import connection_tokens
from store.connection_tokens import Minted, NeedsReauth, Refused, TokenState
from store.keyrings.connections import ConnectionCipher

DEFAULT_DEADLINE_SECONDS = 10.0
MAX_TOKEN_ANSWER = 64 * 1024
FORM = "application/x-www-form-urlencoded"
# The provider's error codes that mean the grant is gone for good (RFC 6749 §5.2; Slack's).
REFUSALS = frozenset(
    {
        "invalid_grant",
        "invalid_client",
        "unauthorized_client",
        "invalid_refresh_token",
        "token_revoked",
        "token_expired",
        "bad_refresh_token",
    }
)


class OAuthTokens:
    """Mints and refreshes OAuth 2 connections' access tokens (see the module)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        cipher: ConnectionCipher,
        client: httpx.AsyncClient,
        guard: HostGuard,
        *,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        alerter: Alerter | None = None,
    ) -> None:
        self._alerter = alerter
        self._sessions = sessions
        self._cipher = cipher
        self._client = client
        self._guard = guard
        self._deadline = deadline_seconds
        self._metadata: dict[str, dict[str, Any]] = {}
        self.refreshes = 0

    async def access_token(
        self,
        tenant_id: str,
        connection_id: str,
        config: dict[str, Any],
        client_secret: str,
        *,
        refused_generation: int | None = None,
    ) -> TokenState:
        """The connection's fresh access token; ``connection_needs_reauth`` when a person
        must connect it again."""

        async def mint(state: TokenState) -> Minted:
            self.refreshes += 1
            return await self._mint(config, client_secret, state)

        try:
            return await connection_tokens.current(
                self._sessions,
                self._cipher,
                tenant_id,
                connection_id,
                mint,
                refused_generation=refused_generation,
            )
        except NeedsReauth as err:
            if self._alerter is not None:  # once per connection: the alert's id is its id
                await self._alerter.hand_off(
                    tenant_id, AlertKind.CONNECTION_NEEDS_REAUTH, connection_id
                )
            raise needs_reauth(connection_id, err.reason) from None

    async def _mint(self, config: dict[str, Any], secret: str, state: TokenState) -> Minted:
        form = {"grant_type": config["grant"]}
        if config["grant"] == "refresh_token":
            if state.refresh_token is None:
                raise Refused("the connection holds no refresh token")
            form["refresh_token"] = state.refresh_token
        elif config.get("scopes"):
            form["scope"] = oauth.PROFILES[config["profile"]].scope_separator.join(config["scopes"])
        async with asyncio.timeout(self._deadline):
            url = oauth.token_endpoint(config, await self._discovered(config))
            answer = await self._post(url, config, secret, form)
        return _minted(answer)

    async def _discovered(self, config: dict[str, Any]) -> dict[str, Any] | None:
        issuer = config.get("issuer")
        if oauth.PROFILES[config["profile"]].token_url is not None or not issuer:
            return None
        if issuer not in self._metadata:
            for url in oauth.discovery_urls(issuer):
                answer = await send(self._client, self._guard, _request("GET", url, {}))
                found = answer.json() if answer.status == 200 else None
                if isinstance(found, dict):
                    self._metadata[issuer] = found
                    break
            else:
                raise _unavailable("the issuer publishes no OAuth metadata", None)
        return self._metadata[issuer]

    async def _post(
        self, url: str, config: dict[str, Any], secret: str, form: dict[str, str]
    ) -> dict[str, Any]:
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        }
        if oauth.PROFILES[config["profile"]].client_auth == "basic":
            pair = f"{quote(config['client_id'], safe='')}:{quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form = {**form, "client_id": config["client_id"], "client_secret": secret}
        request = _request("POST", url, headers, urlencode(form).encode())
        answer = await send(self._client, self._guard, request)
        body = answer.json()
        if not isinstance(body, dict):
            raise _unavailable("the token endpoint answered no JSON object", answer.status)
        error = body.get("error")
        if answer.status == 200 and body.get("ok", True) is not False and not error:
            return body
        if isinstance(error, str) and error in REFUSALS:
            raise Refused(f"the provider refused the grant ({error}): connect it again")
        raise _unavailable("the token endpoint refused the request", answer.status)


def _request(method: str, url: str, headers: dict[str, str], content: bytes = b"") -> SendRequest:
    return SendRequest(
        method,
        url,
        headers=headers,
        timeout=DEFAULT_DEADLINE_SECONDS,
        max_response_bytes=MAX_TOKEN_ANSWER,
        content=content or None,
    )


def _minted(body: dict[str, Any]) -> Minted:
    token = body.get("access_token")
    if not isinstance(token, str) or not token:
        raise _unavailable("the token endpoint answered no access_token", 200)
    expires_in = body.get("expires_in")
    expires_at = (
        datetime.now(UTC) + timedelta(seconds=int(expires_in))
        if isinstance(expires_in, int | float | str) and str(expires_in).isdigit()
        else None
    )
    refresh = body.get("refresh_token")
    return Minted(token, expires_at, refresh if isinstance(refresh, str) and refresh else None)


def _unavailable(message: str, status: int | None) -> ApplicationError:
    """A token endpoint that did not mint: retried, nothing changed (never its text, which
    may echo what was sent)."""
    return fail(
        ErrorTaxonomy.PROVIDER_AUTH_FAILURE if status in (400, 401) else ErrorTaxonomy.UNKNOWN,
        f"OAuth token refresh failed: {message}" + (f" (HTTP {status})" if status else ""),
        http_status=status,
    )


def needs_reauth(connection_id: str, reason: str) -> ApplicationError:
    """The refusal of a call on a connection marked ``needs_reauth``: a policy-time refusal,
    never retried, the provider not called."""
    return refused(
        ErrorCode.CONNECTION_NEEDS_REAUTH,
        f"connection {connection_id} needs to be connected again ({reason}): run "
        f"`moat connection connect <tenant> {connection_id}` (or Connect in the console) and "
        "sign in to the provider",
        connection_id,
    )
