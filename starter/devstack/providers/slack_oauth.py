"""Slack's OAuth v2 in the Slack fake, from its public reference: ``GET
/oauth/v2/authorize`` sends the browser straight back to ``redirect_uri`` with a ``code``
and the ``state`` (a fixed test user consents at once); ``POST /api/oauth.v2.access``
exchanges the code (``grant_type=authorization_code``, the default) or rotates a refresh
token (``grant_type=refresh_token``), the client authenticated by ``client_id`` and
``client_secret`` in the form or HTTP Basic. With token rotation on, as here, the answer
carries an expiring ``xoxe.xoxb-`` access token, ``expires_in`` and a new ``xoxe-1-``
refresh token; the one presented is spent. Failures are HTTP 200 ``{"ok": false}``:
``invalid_client_id``, ``bad_client_secret``, ``invalid_code``, ``bad_redirect_uri``,
``invalid_refresh_token``, ``invalid_grant_type``. When the authorization carried a PKCE
``code_challenge`` (S256), the exchange must carry its ``code_verifier`` (``invalid_code``
otherwise). An issued access token is accepted until it expires (``token_expired``).

Clients: one in ``clients`` must present its secret; with ``accept_any_client`` (the
default, so that ``moat up``'s fake takes any app) any other client id with a non-empty
secret is accepted."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode

from starter.devstack.providers.server import Reply, Request

TEST_USER = "U0FAKEUSER"
LIFETIME = 43200


@dataclass
class _Code:
    client_id: str
    redirect_uri: str
    scope: str
    challenge: str | None


@dataclass
class SlackOAuth:
    """The fake's OAuth state: its clients (id → secret), open codes, live refresh tokens
    and issued access tokens with their expiry (``time.time()``)."""

    clients: dict[str, str] = field(default_factory=dict)
    codes: dict[str, _Code] = field(default_factory=dict)
    refresh_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # → client, scope
    access_tokens: dict[str, float] = field(default_factory=dict)
    lifetime: int = LIFETIME
    accept_any_client: bool = True
    exchanges: int = 0
    refreshes: int = 0

    def expire(self) -> None:
        """Every access token issued so far expires now."""
        for token in self.access_tokens:
            self.access_tokens[token] = 0.0

    def expired(self, token: str) -> bool:
        return token in self.access_tokens and self.access_tokens[token] <= time.time()

    def _known(self, client_id: str) -> bool:
        return client_id in self.clients or (self.accept_any_client and bool(client_id))

    def authorize(self, request: Request) -> Reply:
        q = request.query
        client_id, redirect_uri = q.get("client_id", ""), q.get("redirect_uri", "")
        if not self._known(client_id) or not redirect_uri:
            return Reply(400, {"ok": False, "error": "invalid_client_id"})
        challenge = q.get("code_challenge")
        if challenge and q.get("code_challenge_method", "plain") != "S256":
            return Reply(400, {"ok": False, "error": "invalid_code_challenge_method"})
        code = "fake-code-" + secrets.token_urlsafe(16)
        self.codes[code] = _Code(client_id, redirect_uri, q.get("scope", ""), challenge)
        back = urlencode({"code": code, "state": q.get("state", "")})
        glue = "&" if "?" in redirect_uri else "?"
        return Reply(302, None, {"Location": f"{redirect_uri}{glue}{back}"})

    def access(self, request: Request) -> Reply:
        args = request.params()
        client_id, secret = _client(request, args)
        if not self._known(client_id):
            return _error("invalid_client_id")
        if not secret or self.clients.get(client_id, secret) != secret:
            return _error("bad_client_secret")
        grant = args.get("grant_type") or "authorization_code"
        if grant == "authorization_code":
            code = self.codes.pop(str(args.get("code") or ""), None)
            if code is None or code.client_id != client_id:
                return _error("invalid_code")
            if code.redirect_uri != args.get("redirect_uri", code.redirect_uri):
                return _error("bad_redirect_uri")
            if code.challenge and code.challenge != _s256(str(args.get("code_verifier") or "")):
                return _error("invalid_code")
            self.exchanges += 1
            return self._issue(client_id, code.scope)
        if grant == "refresh_token":
            held = self.refresh_tokens.pop(str(args.get("refresh_token") or ""), None)
            if held is None or held[0] != client_id:
                return _error("invalid_refresh_token")
            self.refreshes += 1
            return self._issue(client_id, held[1])
        return _error("invalid_grant_type")

    def _issue(self, client_id: str, scope: str) -> Reply:
        access = "xoxe.xoxb-1-" + secrets.token_urlsafe(24)
        refresh = "xoxe-1-" + secrets.token_urlsafe(24)
        self.access_tokens[access] = time.time() + self.lifetime
        self.refresh_tokens[refresh] = (client_id, scope)
        body: dict[str, Any] = {
            "ok": True,
            "access_token": access,
            "refresh_token": refresh,
            "expires_in": self.lifetime,
            "token_type": "bot",
            "scope": scope,
            "bot_user_id": "U0FAKEBOT",
            "app_id": "A0FAKEAPP",
            "team": {"id": "T0FAKETEAM", "name": "Fake Workspace"},
            "enterprise": None,
            "authed_user": {"id": TEST_USER},
        }
        return Reply(200, body)


def _client(request: Request, args: dict[str, Any]) -> tuple[str, str]:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic" and value:
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return "", ""
        return unquote(user), unquote(password)
    return str(args.get("client_id") or ""), str(args.get("client_secret") or "")


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _error(error: str) -> Reply:
    return Reply(200, {"ok": False, "error": error})
