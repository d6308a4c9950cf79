"""OAuth 2 provider profiles are data: each one's endpoints, client authentication and
authorization URL; an ``oauth2`` connection's config is checked by its profile; an issuer's
endpoints must be on the issuer's origin."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from schemas.connections import ConnectionCreate
from schemas.oauth import PROFILES, authorize_url, check_config, discovery_urls, token_endpoint


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def test_slack_mints_at_oauth_v2_access_and_sends_the_token_to_its_api() -> None:
    config = check_config({"profile": "slack", "client_id": "123.456", "scopes": ["chat:write"]})
    assert token_endpoint(config) == "https://slack.com/api/oauth.v2.access"
    assert config["base_url"] == "https://slack.com/api"
    assert PROFILES["slack"].client_auth == "post"
    url = authorize_url(
        config, redirect_uri="https://moat.example/cb", state="s", code_challenge="c"
    )
    assert url.startswith("https://slack.com/oauth/v2/authorize?")
    assert _query(url)["code_challenge_method"] == "S256"


def test_github_oauth_app_profile() -> None:
    config = check_config({"profile": "github", "client_id": "Iv1.abc", "scopes": ["repo"]})
    assert token_endpoint(config) == "https://github.com/login/oauth/access_token"
    assert config["base_url"] == "https://api.github.com"
    url = authorize_url(
        config, redirect_uri="https://moat.example/cb", state="s", code_challenge="c"
    )
    assert urlsplit(url).netloc == "github.com" and _query(url)["scope"] == "repo"


def test_google_asks_for_offline_access() -> None:
    config = check_config(
        {"profile": "google", "client_id": "x.apps.googleusercontent.com", "scopes": ["email"]}
        | {"base_url": "https://gmail.googleapis.com"}
    )
    assert token_endpoint(config) == "https://oauth2.googleapis.com/token"
    query = _query(
        authorize_url(config, redirect_uri="https://moat.example/cb", state="s", code_challenge="c")
    )
    assert query["access_type"] == "offline" and query["prompt"] == "consent"


def test_an_oidc_issuer_is_discovered_and_kept_to_its_origin() -> None:
    config = check_config(
        {"profile": "oidc", "client_id": "c", "issuer": "https://id.example.com/realm/"}
    )
    assert discovery_urls(config["issuer"]) == [
        "https://id.example.com/realm/.well-known/oauth-authorization-server",
        "https://id.example.com/realm/.well-known/openid-configuration",
    ]
    found = {"token_endpoint": "https://id.example.com/realm/token"}
    assert token_endpoint(config, found) == "https://id.example.com/realm/token"
    with pytest.raises(ValueError, match="another origin"):
        token_endpoint(config, {"token_endpoint": "https://evil.example.net/token"})


def test_an_oauth2_connection_is_checked_by_its_profile() -> None:
    with pytest.raises(ValidationError, match="profile must be one of"):
        ConnectionCreate(type="oauth2", name="n", secret="s", config={"profile": "nope"})
    with pytest.raises(ValidationError, match="needs issuer"):
        ConnectionCreate(
            type="oauth2",
            name="n",
            secret="s",
            config={"profile": "oidc", "client_id": "c", "base_url": "https://api.example.com"},
        )
    made = ConnectionCreate(
        type="oauth2", name="n", secret="s", config={"profile": "slack", "client_id": "1.2"}
    )
    assert made.config["grant"] == "refresh_token"
