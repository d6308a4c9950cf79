"""A real OpenID provider for tests, built from authlib's authorization server: the
authorization code grant with PKCE (S256, required) and OpenID Connect's ID token (RS256),
a login form a browser fills (user and password), the token endpoint (client_secret_basic
or client_secret_post), the JWKS, discovery and userinfo. Served on loopback by uvicorn on
a thread of its own, so sync browser tests and async tests use it alike.

Not a mock: every request goes through authlib's grant code (client authentication,
redirect URI and PKCE checks, nonce, code single use); only storage is in memory."""

from __future__ import annotations

import asyncio
import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    AuthorizationServer,
    ClientMixin,
    JsonRequest,
    OAuth2Error,
    OAuth2Request,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from starter.devstack import serve_asgi


@dataclass
class User:
    username: str
    password: str
    subject: str
    name: str = ""


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str
    redirect_uris: list[str]
    auth_method: str = "client_secret_basic"

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in scope.split() if s in ("openid", "profile", "email"))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(self.client_secret, client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return endpoint != "token" or method == self.auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: User
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class _Request(OAuth2Request):  # type: ignore[misc]
    """An HTTP request as authlib reads it, its form read beforehand (Starlette reads
    bodies asynchronously, authlib synchronously)."""

    def __init__(self, request: Request, form: dict[str, str]) -> None:
        super().__init__(request.method, str(request.url), headers=request.headers)
        self._args = dict(request.query_params)
        self._form = form
        self.payload = BasicOAuth2Payload({**self._args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Server(AuthorizationServer):  # type: ignore[misc]
    def __init__(self, provider: OpenIDProvider) -> None:
        super().__init__(scopes_supported=["openid", "profile", "email"])
        self.provider = provider

    def query_client(self, client_id: str) -> Client | None:
        return self.provider.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        self.provider.tokens[token["access_token"]] = request.user

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        return request

    def create_json_request(self, request: Any) -> JsonRequest:
        raise NotImplementedError

    def handle_response(self, status: int, body: Any, headers: Any) -> Response:
        if isinstance(body, dict):
            return JSONResponse(body, status, dict(headers))
        return Response(body, status, dict(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None


class _CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        payload = request.payload.data
        provider: OpenIDProvider = self.server.provider
        provider.codes[code] = Code(
            code=code,
            client_id=request.client.client_id,
            redirect_uri=payload.get("redirect_uri", ""),
            scope=request.payload.scope,
            user=request.user,
            nonce=payload.get("nonce"),
            code_challenge=payload.get("code_challenge"),
            code_challenge_method=payload.get("code_challenge_method"),
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found: Code | None = self.server.provider.codes.get(code)
        return found if found is not None and found.client_id == client.client_id else None

    def delete_authorization_code(self, authorization_code: Code) -> None:
        self.server.provider.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: Code) -> User:
        return authorization_code.user


class _OpenIDCode(OpenIDCode):  # type: ignore[misc]
    def __init__(self, provider: OpenIDProvider) -> None:
        super().__init__(require_nonce=True)
        self.provider = provider

    def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
        return any(c.nonce == nonce for c in self.provider.codes.values())

    def resolve_client_private_key(self, client: Client) -> RSAKey:
        return self.provider.key

    def get_client_algorithm(self, client: Client) -> str:
        return "RS256"

    def get_encode_header(self, client: Client) -> dict[str, str]:
        return {"alg": "RS256", "kid": self.provider.key.kid or ""}

    def get_client_claims(self, client: Client) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.provider.issuer,
            "aud": [client.client_id],
            "iat": now,
            "exp": now + 300,
        }

    def generate_user_info(self, user: User, scope: str) -> UserInfo:
        return UserInfo(sub=user.subject, name=user.name or user.username)


class OpenIDProvider:
    """``with OpenIDProvider() as idp``: an OpenID provider on loopback (``idp.issuer``).
    Register a client and users, then send a browser (or an RP) to it."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8)})
        self.clients: dict[str, Client] = {}
        self.users: dict[str, User] = {}
        self.codes: dict[str, Code] = {}
        self.tokens: dict[str, User] = {}
        self.issuer = ""
        # Where discovery says the endpoints are (a test's misconfigured provider); None:
        # at the issuer.
        self.endpoints_at: str | None = None
        self.server = _Server(self)
        self.server.register_token_generator("default", BearerTokenGenerator(_token))
        self.server.register_grant(_CodeGrant, [CodeChallenge(required=True), _OpenIDCode(self)])
        self.app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/authorize", self._authorize, methods=["GET", "POST"]),
                Route("/token", self._token, methods=["POST"]),
                Route("/userinfo", self._userinfo),
            ]
        )
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def add_client(self, *redirect_uris: str, auth_method: str = "client_secret_basic") -> Client:
        """A confidential client; more redirect URIs may be appended to it later (a
        gateway's, once it listens)."""
        client = Client(
            client_id=f"moat-{secrets.token_hex(4)}",
            client_secret=secrets.token_urlsafe(24),
            redirect_uris=list(redirect_uris),
            auth_method=auth_method,
        )
        self.clients[client.client_id] = client
        return client

    def add_user(self, username: str, name: str = "") -> User:
        user = User(username, secrets.token_urlsafe(12), f"sub-{secrets.token_hex(8)}", name)
        self.users[username] = user
        return user

    # --- endpoints ----------------------------------------------------------------------

    async def _discovery(self, request: Request) -> Response:
        at = self.endpoints_at or self.issuer
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{at}/authorize",
                "token_endpoint": f"{at}/token",
                "jwks_uri": f"{at}/jwks",
                "userinfo_endpoint": f"{at}/userinfo",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "profile", "email"],
                "token_endpoint_auth_methods_supported": sorted(
                    {c.auth_method for c in self.clients.values()} or {"client_secret_basic"}
                ),
                "code_challenge_methods_supported": ["S256"],
                "grant_types_supported": ["authorization_code"],
            }
        )

    async def _jwks(self, request: Request) -> Response:
        return JSONResponse({"keys": [self.key.as_dict(private=False)]})

    async def _authorize(self, request: Request) -> Response:
        form = dict(await request.form()) if request.method == "POST" else {}
        oauth = _Request(request, {k: str(v) for k, v in form.items()})
        try:
            grant = self.server.get_consent_grant(oauth)
        except OAuth2Error as error:
            return JSONResponse(dict(error.get_body()), error.status_code)
        if request.method == "GET":
            return _login_form(dict(request.query_params))
        user = self.users.get(oauth.form.get("username", ""))
        if user is None or not secrets.compare_digest(
            user.password, oauth.form.get("password", "")
        ):
            return _login_form(dict(request.query_params), "Wrong user name or password.")
        oauth.user = user
        response: Response = self.server.create_authorization_response(
            oauth, grant_user=user, grant=grant
        )
        return response

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        response: Response = self.server.create_token_response(_Request(request, form))
        return response

    async def _userinfo(self, request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        user = self.tokens.get(token) if scheme.lower() == "bearer" else None
        if user is None:
            return JSONResponse({"error": "invalid_token"}, 401)
        return JSONResponse({"sub": user.subject, "name": user.name or user.username})

    # --- serving ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        ready = threading.Event()

        async def serve() -> None:
            self._stop = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            async with serve_asgi(self.app) as url:
                self.issuer = url
                ready.set()
                await self._stop.wait()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
        self._thread.start()
        if not ready.wait(timeout=20):
            raise RuntimeError("the OpenID provider did not start")
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)


def _token(client: Client, grant_type: str, user: User | None = None, scope: str = "") -> str:
    return secrets.token_urlsafe(32)


def _login_form(params: dict[str, str], error: str = "") -> HTMLResponse:
    """The provider's sign-in page: the authorization request's parameters carried in
    hidden fields (posted back to ``/authorize`` with the user and password)."""
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in params.items()
    )
    said = f'<p role="alert">{html.escape(error)}</p>' if error else ""
    return HTMLResponse(
        '<!doctype html><html lang="en"><head><title>Test provider sign-in</title></head>'
        f"<body><main><h1>Sign in to the test provider</h1>{said}"
        f'<form method="post" action="/authorize">{hidden}'
        '<label>User <input name="username" autocomplete="username"></label>'
        '<label>Password <input name="password" type="password"></label>'
        '<button type="submit">Sign in</button></form></main></body></html>',
        200 if not error else 401,
    )
