"""A real OAuth 2 authorization server for tests, built from authlib's grants: the refresh
token grant with rotation on (every refresh answers a new refresh token and revokes the
one presented) and reuse detection (a rotated refresh token presented again revokes its
whole family, RFC 9700 §4.14.2), the client credentials grant, and a resource endpoint
that accepts only a live access token. Served on loopback on a thread of its own.

Not a mock: the token endpoint is authlib's (client authentication, grant checks); only
storage is in memory. It counts what it was asked."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    JsonRequest,
    OAuth2Request,
    TokenMixin,
)
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant, RefreshTokenGrant
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from starter.devstack import serve_asgi
from tests.support.oidc import _Request

GRANTS = ("refresh_token", "client_credentials", "authorization_code")


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str
    auth_method: str = "client_secret_basic"

    def get_client_id(self) -> str:
        return self.client_id

    def get_allowed_scope(self, scope: str) -> str:
        return scope

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(self.client_secret, client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.auth_method

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in GRANTS


@dataclass
class Token(TokenMixin):  # type: ignore[misc]
    access_token: str
    refresh_token: str | None
    client_id: str
    scope: str
    subject: str
    family: str
    expires_at: float
    revoked: bool = False
    rotated: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return max(0, int(self.expires_at - time.time()))

    def is_expired(self) -> bool:
        return time.time() >= self.expires_at

    def is_revoked(self) -> bool:
        return self.revoked


@dataclass
class Counts:
    refreshes: int = 0
    client_credentials: int = 0
    invalid_grant: int = 0
    families_revoked: int = 0
    resource_ok: int = 0
    resource_refused: int = 0
    issued: list[str] = field(default_factory=list)


class _Server(AuthorizationServer):  # type: ignore[misc]
    def __init__(self, provider: OAuthServer) -> None:
        super().__init__()
        self.provider = provider

    def query_client(self, client_id: str) -> Client | None:
        return self.provider.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        old = getattr(request, "refresh_token", None)
        family = old.family if isinstance(old, Token) else secrets.token_hex(8)
        subject = old.subject if isinstance(old, Token) else request.client.client_id
        self.provider.keep(token, request.client.client_id, subject, family)

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request

    def create_json_request(self, request: Any) -> JsonRequest:
        raise NotImplementedError

    def handle_response(self, status: int, body: Any, headers: Any) -> Response:
        if isinstance(body, dict):
            if body.get("error") == "invalid_grant":
                self.provider.counts.invalid_grant += 1
            return JSONResponse(body, status, dict(headers))
        return Response(body, status, dict(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None


class _Refresh(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        provider: OAuthServer = self.server.provider
        token = provider.by_refresh.get(refresh_token)
        if token is None or token.revoked:
            return None
        if token.rotated:  # reuse of a rotated refresh token: the whole family goes
            provider.revoke_family(token.family)
            return None
        provider.counts.refreshes += 1
        return token

    def authenticate_user(self, credential: Token) -> str:
        return credential.subject

    def revoke_old_credential(self, credential: Token) -> None:
        credential.rotated = True


class _ClientCredentials(ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def create_token_response(self) -> Any:
        self.server.provider.counts.client_credentials += 1
        return super().create_token_response()


class OAuthServer:
    """``with OAuthServer(access_seconds=...) as server``: on loopback at ``server.url``;
    its token endpoint ``/token``, its resource ``/resource``, RFC 8414 metadata."""

    def __init__(self, access_seconds: int = 3600) -> None:
        self.access_seconds = access_seconds
        self.clients: dict[str, Client] = {}
        self.by_access: dict[str, Token] = {}
        self.by_refresh: dict[str, Token] = {}
        self.counts = Counts()
        self.url = ""
        self.server = _Server(self)
        self.server.register_token_generator(
            "default",
            BearerTokenGenerator(
                lambda *a, **k: secrets.token_urlsafe(32),
                lambda *a, **k: secrets.token_urlsafe(32),
                lambda client, grant_type: self.access_seconds,
            ),
        )
        self.server.register_grant(_Refresh)
        self.server.register_grant(_ClientCredentials)
        self.app = Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/token", self._token, methods=["POST"]),
                Route("/resource", self._resource),
            ]
        )
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def add_client(self, auth_method: str = "client_secret_basic") -> Client:
        client = Client(f"moat-{secrets.token_hex(4)}", secrets.token_urlsafe(24), auth_method)
        self.clients[client.client_id] = client
        return client

    def grant(self, client: Client, subject: str, *, expires_in: int) -> Token:
        """A pair as the authorization code grant would have issued it to ``subject``."""
        pair = {
            "access_token": secrets.token_urlsafe(32),
            "refresh_token": secrets.token_urlsafe(32),
            "scope": "read",
            "expires_in": expires_in,
        }
        return self.keep(pair, client.client_id, subject, secrets.token_hex(8))

    def keep(self, pair: dict[str, Any], client_id: str, subject: str, family: str) -> Token:
        token = Token(
            pair["access_token"],
            pair.get("refresh_token"),
            client_id,
            pair.get("scope", ""),
            subject,
            family,
            time.time() + int(pair.get("expires_in", self.access_seconds)),
        )
        self.by_access[token.access_token] = token
        if token.refresh_token:
            self.by_refresh[token.refresh_token] = token
        self.counts.issued.append(token.access_token)
        return token

    def revoke_family(self, family: str) -> None:
        self.counts.families_revoked += 1
        for token in self.by_access.values():
            if token.family == family:
                token.revoked = True

    async def _metadata(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.url,
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "grant_types_supported": list(GRANTS),
            }
        )

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        response: Response = self.server.create_token_response(_Request(request, form))
        return response

    async def _resource(self, request: Request) -> Response:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        token = self.by_access.get(presented) if scheme.lower() == "bearer" else None
        if token is None or token.revoked or token.is_expired():
            self.counts.resource_refused += 1
            return JSONResponse({"error": "invalid_token"}, 401)
        self.counts.resource_ok += 1
        return JSONResponse({"ok": True, "subject": token.subject})

    def __enter__(self) -> Self:
        ready = threading.Event()

        async def serve() -> None:
            self._stop = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            async with serve_asgi(self.app) as url:
                self.url = url
                ready.set()
                await self._stop.wait()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
        self._thread.start()
        if not ready.wait(timeout=20):
            raise RuntimeError("the OAuth server did not start")
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
