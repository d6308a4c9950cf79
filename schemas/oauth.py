"""OAuth 2 connections: a connection whose credential is an access token Moat obtains and
refreshes itself, from a provider's token endpoint, with the client secret the connection
seals (its ``secret``).

The config names the provider profile (``profile``), the grant (``grant``:
``refresh_token`` for a person's account connected by the authorization code flow,
``client_credentials`` for a service account), the client id and the scopes. A profile is
data: where its endpoints are, how the client authenticates, what the answer looks like.
The ``oidc`` profile takes an ``issuer`` and finds its token endpoint by metadata discovery;
its endpoints must be on the issuer's origin, like every profile's on its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from schemas.connections import ConnectionKind, parse_origin

OAUTH2 = "oauth2"
GRANTS = ("refresh_token", "client_credentials")
MAX_SCOPES = 50


@dataclass(frozen=True)
class Profile:
    """A provider's OAuth 2 endpoints and manners. ``client_auth``: ``basic`` (HTTP Basic,
    RFC 6749 §2.3.1) or ``post`` (client id and secret in the form). ``api``: the origin the
    access token is sent to when the config names none. ``extra_authorize``: parameters the
    authorization URL carries besides the standard ones."""

    name: str
    authorize_url: str | None
    token_url: str | None
    client_auth: str = "basic"
    api: str | None = None
    scope_separator: str = " "
    extra_authorize: tuple[tuple[str, str], ...] = ()
    on_base_url: bool = False
    stands_for: str | None = None


PROFILES: dict[str, Profile] = {
    # Slack's OAuth v2, with token rotation on: refresh_token + expires_in in the answer.
    "slack": Profile(
        "slack",
        "https://slack.com/oauth/v2/authorize",
        "https://slack.com/api/oauth.v2.access",
        client_auth="post",
        api="https://slack.com/api",
        scope_separator=",",
        on_base_url=True,
        stands_for="slack",
    ),
    # A GitHub OAuth App (user-to-server tokens; expiring ones rotate their refresh token).
    "github": Profile(
        "github",
        "https://github.com/login/oauth/authorize",
        "https://github.com/login/oauth/access_token",
        client_auth="post",
        api="https://api.github.com",
    ),
    # Google: offline access gives a refresh token (which Google does not rotate).
    "google": Profile(
        "google",
        "https://accounts.google.com/o/oauth2/v2/auth",
        "https://oauth2.googleapis.com/token",
        client_auth="post",
        extra_authorize=(("access_type", "offline"), ("prompt", "consent")),
    ),
    # Any OAuth 2 / OpenID provider: endpoints from its issuer's metadata.
    "oidc": Profile("oidc", None, None),
}

DISCOVERY_PATHS = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")


def _scopes(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_SCOPES:
        raise ValueError(f"scopes must be a list of at most {MAX_SCOPES} scope names")
    if not all(isinstance(s, str) and s and " " not in s and len(s) <= 200 for s in value):
        raise ValueError("scopes must be scope names (no spaces)")
    return list(value)


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """An ``oauth2`` connection's config checked: a known ``profile``, a ``grant``, a
    ``client_id``, ``scopes``; the ``oidc`` profile an ``issuer`` (an https origin or URL).
    A profile with an API origin of its own lends it as ``base_url`` when none is named."""
    profile = PROFILES.get(str(config.get("profile", "")))
    if profile is None:
        raise ValueError(f"profile must be one of {', '.join(sorted(PROFILES))}")
    grant = config.get("grant", "refresh_token")
    if grant not in GRANTS:
        raise ValueError(f"grant must be one of {', '.join(GRANTS)}")
    client_id = config.get("client_id")
    if not isinstance(client_id, str) or not 0 < len(client_id) <= 200:
        raise ValueError("client_id must be the OAuth client's id")
    out = {**config, "grant": grant, "scopes": _scopes(config.get("scopes"))}
    if profile.token_url is None:
        issuer = config.get("issuer")
        if not isinstance(issuer, str):
            raise ValueError("the oidc profile needs issuer (the provider's URL)")
        parse_origin(issuer, path_allowed=True)
        out["issuer"] = issuer.rstrip("/")
    if profile.api is not None and "base_url" not in out and "allowed_origins" not in out:
        out["base_url"] = profile.api
    if profile.on_base_url and isinstance(out.get("base_url"), str):
        parse_origin(out["base_url"], path_allowed=True)
    return out


def stands_for(connection_type: str, config: Mapping[str, Any]) -> str | None:
    """The type an ``oauth2`` connection also counts as (its profile's ``stands_for``)."""
    profile = PROFILES.get(str(config.get("profile", ""))) if connection_type == OAUTH2 else None
    return profile.stands_for if profile is not None else None


def _endpoint(config: dict[str, Any], url: str) -> str:
    """``url`` on the origin of the config's ``base_url`` when the profile's endpoints
    follow it (``on_base_url``), else as the profile names it."""
    base = config.get("base_url")
    if not PROFILES[config["profile"]].on_base_url or not isinstance(base, str):
        return url
    origin = urlsplit(base.strip())
    return urlunsplit((origin.scheme, origin.netloc, urlsplit(url).path, "", ""))


def token_endpoint(config: dict[str, Any], metadata: dict[str, Any] | None = None) -> str:
    """Where the connection's tokens are minted: the profile's, or the issuer's metadata's
    (which must be on the issuer's origin: ValueError otherwise)."""
    profile = PROFILES[config["profile"]]
    if profile.token_url is not None:
        return _endpoint(config, profile.token_url)
    return _on_issuer(config["issuer"], (metadata or {}).get("token_endpoint"))


def authorize_url(
    config: dict[str, Any],
    *,
    redirect_uri: str,
    state: str,
    code_challenge: str,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Where a person is sent to grant the connection (authorization code with PKCE S256)."""
    profile = PROFILES[config["profile"]]
    base = (
        _endpoint(config, profile.authorize_url)
        if profile.authorize_url
        else _on_issuer(config["issuer"], (metadata or {}).get("authorization_endpoint"))
    )
    params = {
        "response_type": "code",
        "client_id": config["client_id"],
        "redirect_uri": redirect_uri,
        "scope": profile.scope_separator.join(config.get("scopes", [])),
        "state": state,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
        **dict(profile.extra_authorize),
    }
    return f"{base}?{urlencode(params)}"


def _on_issuer(issuer: str, endpoint: Any) -> str:
    if not isinstance(endpoint, str):
        raise ValueError("the issuer's metadata names no such endpoint")
    if parse_origin(endpoint, path_allowed=True) != parse_origin(issuer, path_allowed=True):
        raise ValueError("the issuer's metadata names an endpoint on another origin")
    return endpoint


def discovery_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata is looked for (RFC 8414, then OpenID Connect Discovery)."""
    return [issuer.rstrip("/") + path for path in DISCOVERY_PATHS]


OAUTH2_KIND = ConnectionKind(
    OAUTH2,
    "An OAuth 2 grant (secret: the client secret); Moat mints and refreshes its access token.",
    check_config=check_config,
)
