"""GitHub App installation tokens in the GitHub fake, from GitHub's REST reference ("Create
an installation access token for an app", "Generating a JSON Web Token (JWT) for a GitHub
App", "Revoke an installation access token").

``POST /app/installations/{installation_id}/access_tokens`` takes the App's JWT as the
bearer: RS256, signed by a private key whose public key the App registered
(``register_app``), ``iss`` the App's id, ``iat`` not in the future (a minute of clock
drift allowed), ``exp`` after now and at most 10 minutes after ``iat``. A bad JWT is 401
with GitHub's body, an installation the App does not have is 404, a suspended one 403;
otherwise 201 with ``token`` (``ghs_…``), ``expires_at`` (an hour on), ``permissions`` and
``repository_selection``. ``DELETE /installation/token`` revokes the bearer's own
installation token (204). An installation token is good until its ``expires_at`` and until
revoked; ``mints`` counts the tokens issued. ``POST /_fake/apps`` registers an App.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

from starter.devstack.providers.server import Reply, Request

DOCS = "https://docs.github.com/rest"
_MINT = re.compile(r"^/app/installations/([0-9]+)/access_tokens$")
TOKEN_SECONDS = 3600
MAX_JWT_SECONDS = 600
DRIFT_SECONDS = 60
SUSPENDED = "This installation has been suspended"


@dataclass
class Installation:
    app_id: int
    permissions: dict[str, str] = field(default_factory=lambda: {"issues": "write"})
    repository_selection: str = "selected"
    suspended: bool = False


class GithubApps:
    """The Apps and installations the fake knows, and the installation tokens it issued."""

    def __init__(self) -> None:
        self.public_keys: dict[int, RSAKey] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, tuple[int, float]] = {}  # token -> (installation, expires)
        self.revoked: set[str] = set()
        self.mints = 0
        self.token_seconds = TOKEN_SECONDS
        self.jwt_refusals: list[str] = []  # why each refused JWT was refused

    def register_app(self, app_id: int, public_key_pem: str | bytes, *installations: int) -> None:
        self.public_keys[app_id] = RSAKey.import_key(public_key_pem)
        for number in installations:
            self.installations[number] = Installation(app_id)

    def reset_tokens(self) -> None:
        self.tokens.clear()
        self.revoked.clear()
        self.jwt_refusals.clear()
        self.mints = 0

    def is_installation_token(self, token: str | None) -> bool:
        return token is not None and token.startswith("ghs_")

    def token_good(self, token: str) -> bool:
        held = self.tokens.get(token)
        return held is not None and token not in self.revoked and held[1] > time.time()

    def handle(self, request: Request) -> Reply | None:
        """The App routes' answer; None for any other path. ``POST /_fake/apps`` registers
        an App (``{"app_id", "public_key": PEM, "installations": [ids]}``) for
        ``moat up --fake-providers``."""
        if request.path == "/_fake/apps" and request.method == "POST":
            args = request.json()
            if not isinstance(args, dict):
                return _refusal(400, "Problems parsing JSON")
            numbers = [int(n) for n in args.get("installations") or []]
            self.register_app(int(args["app_id"]), str(args["public_key"]), *numbers)
            return Reply(200, {"ok": True})
        match = _MINT.match(request.path)
        if match is not None and request.method == "POST":
            return self._mint(request, int(match.group(1)))
        if request.path == "/installation/token" and request.method == "DELETE":
            token = request.bearer()
            if token is None or not self.token_good(token):
                return _refusal(401, "Bad credentials")
            self.revoked.add(token)
            return Reply(204)
        return None

    def _mint(self, request: Request, number: int) -> Reply:
        app_id, why = self._app_of(request.bearer() or "")
        if app_id is None:
            self.jwt_refusals.append(why)
            return _refusal(401, why)
        installation = self.installations.get(number)
        if installation is None or installation.app_id != app_id:
            return _refusal(404, "Not Found")
        if installation.suspended:
            return _refusal(403, SUSPENDED)
        self.mints += 1
        token = "ghs_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]
        expires = int(time.time()) + self.token_seconds
        self.tokens[token] = (number, float(expires))
        body: dict[str, Any] = {
            "token": token,
            "expires_at": datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "permissions": dict(installation.permissions),
            "repository_selection": installation.repository_selection,
        }
        return Reply(201, body)

    def _app_of(self, token: str) -> tuple[int | None, str]:
        """The App the JWT authenticates, or None and GitHub's reason."""
        claims = _claims(token)
        iss = claims.get("iss") if claims else None
        try:
            app_id = int(str(iss))
        except ValueError:
            return None, "A JSON web token could not be decoded"
        key = self.public_keys.get(app_id)
        if key is None:
            return None, "Integration not found"
        try:
            verified = jwt.decode(token, key, algorithms=["RS256"]).claims
        except (JoseError, ValueError):
            return None, "A JSON web token could not be decoded"
        now = int(time.time())
        iat, exp = verified.get("iat"), verified.get("exp")
        if not isinstance(iat, int) or iat > now + DRIFT_SECONDS:
            return None, (
                "'Issued at' claim ('iat') must be an Integer representing the time that the "
                "assertion was issued."
            )
        if not isinstance(exp, int) or exp <= now:
            return None, (
                "'Expiration time' claim ('exp') must be a numeric value representing the "
                "future time at which the assertion expires."
            )
        if exp - iat > MAX_JWT_SECONDS:
            return None, "'Expiration time' claim ('exp') is too far in the future."
        return app_id, ""


def _claims(token: str) -> dict[str, Any] | None:
    """The JWT's claims, unverified (to find which App's key checks it)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refusal(status: int, message: str) -> Reply:
    return Reply(status, {"message": message, "documentation_url": DOCS, "status": str(status)})
