"""Connecting a person's account to an ``oauth2`` connection: the authorization code grant
with PKCE (S256).

``begin`` answers the URL the person opens. Its ``state`` is sealed, not stored: the
tenant, the connection, the PKCE verifier and an expiry, sealed with the connection
keyring under an associated data of its own, so only Moat can make or read one and a
state is bound to the connection it was made for. ``finish`` (the gateway's public
callback) opens the state, exchanges the code at the profile's (or issuer's) token
endpoint with the verifier and the sealed client secret, and stores the pair
(``store.connection_tokens.store``), which clears ``needs_reauth``.

The token endpoint is on the profile's or issuer's origin (``schemas.oauth``) and is
judged by the webhook URL rule (an address literal must be public or allow-listed)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from schemas import oauth
from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from starter.service.errors import MoatError
from starter.service.webhooks import check_url
from store import connection_tokens, connections
from store.connection_tokens import Minted
from store.keyrings.connections import ConnectionCipher, Sealed

CALLBACK_PATH = "/v1/connections/oauth/callback"
STATE_LIFETIME = timedelta(minutes=10)
_STATE_CONTEXT = b"moat oauth2 state"
TIMEOUT = 10.0


def redirect_uri(settings: MoatSettings) -> str:
    """Where the provider sends the person back: this Moat's gateway's callback (the OAuth
    client must list it)."""
    return settings.local_gateway_url.rstrip("/") + CALLBACK_PATH


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _refused(message: str) -> MoatError:
    return MoatError(ErrorCode.FORBIDDEN, message)


async def _oauth_row(session: AsyncSession, tenant_id: str, connection_id: str) -> Any:
    row = await connections.get_connection(session, tenant_id, connection_id)
    if row is None or row.revoked_at is not None or row.type != oauth.OAUTH2:
        raise MoatError(
            ErrorCode.CONNECTION_NOT_FOUND,
            f"No live oauth2 connection {connection_id[:80]!r}; `moat connection list` shows "
            "the tenant's.",
        )
    if row.config.get("grant") != "refresh_token":
        raise _refused("A client_credentials connection is not connected by a person.")
    return row


async def metadata(http: httpx.AsyncClient, config: dict[str, Any], allow: list[str]) -> Any:
    """The issuer's metadata for the ``oidc`` profile (None for the others)."""
    if oauth.PROFILES[config["profile"]].token_url is not None:
        return None
    for url in oauth.discovery_urls(config["issuer"]):
        check_url(url, allow)
        answer = await http.get(url, timeout=TIMEOUT)
        if answer.status_code == 200:
            return answer.json()
    raise _refused("The issuer publishes no OAuth metadata.")


async def begin(
    session: AsyncSession,
    cipher: ConnectionCipher,
    tenant_id: str,
    connection_id: str,
    *,
    redirect_uri: str,
    found: dict[str, Any] | None = None,
    console: bool = False,
) -> str:
    """The authorization URL a person opens to connect the account (``console``: started
    from the console, whose connections page the callback moves on to)."""
    row = await _oauth_row(session, tenant_id, connection_id)
    verifier = secrets.token_urlsafe(48)
    challenge = _b64(hashlib.sha256(verifier.encode()).digest())
    expires = (datetime.now(UTC) + STATE_LIFETIME).timestamp()
    sealed = cipher.seal(
        json.dumps({"t": tenant_id, "c": row.id, "v": verifier, "e": expires, "k": console}),
        _STATE_CONTEXT,
    )
    state = ".".join((sealed.key_id, _b64(sealed.nonce), _b64(sealed.ciphertext)))
    return oauth.authorize_url(
        dict(row.config),
        redirect_uri=redirect_uri,
        state=state,
        code_challenge=challenge,
        metadata=found,
    )


def from_console(cipher: ConnectionCipher, state: str) -> bool:
    """Whether the flow ``state`` (already opened by ``open_state``) began in the console."""
    key_id, nonce, ciphertext = state.split(".")
    opened = json.loads(
        cipher.open(Sealed(key_id, _unb64(nonce), _unb64(ciphertext)), _STATE_CONTEXT)
    )
    return opened.get("k") is True


def open_state(cipher: ConnectionCipher, state: str) -> tuple[str, str, str]:
    """The tenant, connection and PKCE verifier a state was made for; refused when it was
    not made by this Moat, or is older than ``STATE_LIFETIME``."""
    try:
        key_id, nonce, ciphertext = state.split(".")
        opened = json.loads(
            cipher.open(Sealed(key_id, _unb64(nonce), _unb64(ciphertext)), _STATE_CONTEXT)
        )
    except Exception:
        raise _refused("The state does not come from this Moat: connect again.") from None
    if opened["e"] < datetime.now(UTC).timestamp():
        raise _refused("The connection attempt expired: run `moat connection connect` again.")
    return opened["t"], opened["c"], opened["v"]


async def finish(
    session: AsyncSession,
    cipher: ConnectionCipher,
    http: httpx.AsyncClient,
    *,
    tenant_id: str,
    connection_id: str,
    verifier: str,
    code: str,
    redirect_uri: str,
    allow: list[str],
) -> str:
    """Exchange ``code`` and store the pair; answers the connection's id."""
    row = await _oauth_row(session, tenant_id, connection_id)
    config = dict(row.config)
    url = oauth.token_endpoint(config, await metadata(http, config, allow))
    check_url(url, allow)
    secret = connections.open_secret(cipher, row)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    headers = {"Accept": "application/json"}
    if oauth.PROFILES[config["profile"]].client_auth == "basic":
        pair = f"{quote(config['client_id'], safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form |= {"client_id": config["client_id"], "client_secret": secret}
    answer = await http.post(url, data=form, headers=headers, timeout=TIMEOUT)
    body = (
        answer.json()
        if answer.headers.get("content-type", "").startswith("application/json")
        else {}
    )
    token = body.get("access_token") if isinstance(body, dict) else None
    if answer.status_code != 200 or not isinstance(token, str) or body.get("ok") is False:
        raise _refused(
            "The provider did not grant the connection: run `moat connection connect` again."
        )
    expires_in = body.get("expires_in")
    expires_at = (
        datetime.now(UTC) + timedelta(seconds=int(expires_in))
        if isinstance(expires_in, int)
        else None
    )
    refresh = body.get("refresh_token")
    minted = Minted(token, expires_at, refresh if isinstance(refresh, str) else None)
    await connection_tokens.store(session, cipher, tenant_id, row.id, minted)
    return str(row.id)
