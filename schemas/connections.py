"""Connections: a tenant's credential for one provider, stored once and named by id.

An agent's request and a run's history carry only the connection's id. The secret is
decrypted by the adapter activity at the moment of the call and handed to the adapter as a
``Credential``, which never reaches Temporal, a log line or a record."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from schemas.canonical import json_depth
from schemas.hosts import (
    IPV4_PATTERN,
    IPV6_PATTERN,
    MAX_NAME_LENGTH,
    canonical_host,
    parse_allow_entry,
)
from schemas.jsonvalues import SECRET_KEY_PATTERN, STORABLE_JSON, STORABLE_TEXT_PATTERN, marker


class ConnectionType(StrEnum):
    """Moat's own connection types; an installed package may declare more
    (``ConnectionKind``)."""

    WEBHOOK = "webhook"
    SLACK = "slack"
    GITHUB = "github"
    HTTP_BEARER = "http_bearer"


# Where a provider connection's secret goes when its config names no ``base_url``.
DEFAULT_BASE_URLS: dict[ConnectionType, str] = {
    ConnectionType.SLACK: "https://slack.com/api",
    ConnectionType.GITHUB: "https://api.github.com",
}

# A connection type's name: a built-in's, or one an installed package declares.
CONNECTION_TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
ConnectionTypeName = Annotated[str, Field(pattern=CONNECTION_TYPE_PATTERN, max_length=40)]


@dataclass(frozen=True)
class ConnectionKind:
    """A connection type: what its credential is for, where its secret may go when the
    config names nowhere (``default_base_url``; None: the config must name an origin), and
    what else its config must hold (``check_config``: the config normalized, or a
    ``PydanticCustomError``/``ValueError`` saying what is wrong, never repeating a value).
    ``http`` False: the secret is not sent over HTTP (an SMTP password), so the origin
    rules do not apply and ``check_config`` says where it may go. ``config_schema``: the
    JSON Schema of the config ``check_config`` takes, which the route's schema states for
    the type (``$defs`` inlined).

    A package declares its own beside its capabilities (``Capability.connection_kinds``)."""

    name: str
    description: str = ""
    default_base_url: str | None = None
    check_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    http: bool = True
    config_schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)


def _github_config(config: dict[str, Any]) -> dict[str, Any]:
    """A GitHub App connection names both ``app_id`` and ``installation_id`` (positive
    integers); a token connection names neither."""
    named = [k for k in GITHUB_APP_KEYS if config.get(k) is not None]
    if not named:
        return config
    if len(named) != len(GITHUB_APP_KEYS):
        raise ValueError("a GitHub App connection names both app_id and installation_id")
    for key in GITHUB_APP_KEYS:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer (GitHub's number for it)")
    return config


GITHUB_APP_KEYS = ("app_id", "installation_id")


def holds_github_app(type: str, config: Mapping[str, Any]) -> bool:
    """The connection is a GitHub App installation: its secret is the App's private key."""
    return type == ConnectionType.GITHUB and config.get("app_id") is not None


BUILTIN_KINDS: tuple[ConnectionKind, ...] = (
    ConnectionKind("webhook", "A tenant's endpoint that takes Standard Webhooks deliveries."),
    ConnectionKind("slack", "A Slack bot token.", DEFAULT_BASE_URLS[ConnectionType.SLACK]),
    ConnectionKind(
        "github",
        "A GitHub token, or a GitHub App installation (config app_id and installation_id, "
        "the App's private key, in PEM, as the secret).",
        DEFAULT_BASE_URLS[ConnectionType.GITHUB],
        check_config=_github_config,
    ),
    ConnectionKind("http_bearer", "A bearer token for an HTTP API the config names."),
)


def connection_kind(name: str) -> ConnectionKind | None:
    """The installed connection type ``name`` (``schemas.registry.connection_kinds``)."""
    from schemas.registry import connection_kinds

    return connection_kinds().get(name)


DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_ALLOWED_ORIGINS = 20


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port: where a request goes, as far as a credential is concerned.
    ``host`` is canonical (``schemas.hosts.canonical_host``); ``port`` is always given."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}"


def origin_of(scheme: str, host: str, port: int | None) -> Origin:
    """The origin of a URL already parsed (by whatever sends the request)."""
    scheme = scheme.lower()
    return Origin(
        scheme, canonical_host(host), DEFAULT_PORTS.get(scheme, 0) if port is None else port
    )


def parse_origin(text: str, *, path_allowed: bool = False) -> Origin:
    """The origin of an absolute http(s) URL (``path_allowed``: a base URL) or of an origin
    (``https://host[:port]``, a final ``/`` at most); ValueError saying why not."""
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.netloc:
        raise ValueError("must be an absolute http:// or https:// URL")
    if "@" in parts.netloc:
        raise ValueError("may not hold a user name or password (put the credential in `secret`)")
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise ValueError("may not hold a query or a fragment")
    if not path_allowed and parts.path not in ("", "/"):
        raise ValueError("is an origin (scheme, host and port), without a path")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("has an invalid port")
    host = parts.hostname or ""
    # The host by the allow-list's rules: a DNS name (xn-- form) or an IP address.
    try:
        entry = parse_allow_entry(f"[{host}]" if ":" in host else host)
    except ValueError:
        raise ValueError(
            "has no valid host (a DNS name, an international one in its xn-- form, or an IP "
            "address)"
        ) from None
    return Origin(scheme, entry.host, DEFAULT_PORTS[scheme] if port is None else port)


def bound_origins(type: str, config: Mapping[str, Any]) -> tuple[Origin, ...]:
    """The origins a connection's secret may be sent to: ``config.allowed_origins`` when
    given, else ``config.base_url``'s origin, else the provider's default; none (the secret
    goes nowhere) for a connection that names none, or names one that does not parse."""
    try:
        allowed = config.get("allowed_origins")
        if allowed is not None:
            if not isinstance(allowed, list):
                return ()
            return tuple(parse_origin(str(o)) for o in allowed)
        kind = connection_kind(type)
        base = config.get("base_url") or (kind.default_base_url if kind else None)
        if not isinstance(base, str) or (kind is not None and not kind.http):
            return ()
        return (parse_origin(base, path_allowed=True),)
    except ValueError:
        return ()


@dataclass(frozen=True)
class Credential:
    """A decrypted connection, alive for one adapter call."""

    connection_id: str
    type: str
    secret: str = field(repr=False)
    config: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = ""
    # An OAuth 2 connection's access token generation (``store.connection_tokens``).
    generation: int | None = None

    @property
    def origins(self) -> tuple[Origin, ...]:
        """Where this connection's secret may be sent (``bound_origins``)."""
        return bound_origins(self.type, self.config)


class ConnectionResolver(Protocol):
    """Resolves and decrypts a tenant's connection under that tenant's row-level security.

    Raises ``ApplicationError`` (non-retryable) with error code ``connection_not_found``
    (absent, or another tenant's) or ``connection_revoked``."""

    async def resolve(self, tenant_id: str, connection_id: str) -> Credential: ...


@runtime_checkable
class TokenRefresher(Protocol):
    """A resolver that can refresh an OAuth 2 connection's access token the provider
    refused although it looked fresh."""

    async def refreshed(self, tenant_id: str, stale: Credential) -> Credential: ...


# What the API takes and answers. The secret is taken, never answered: a connection is
# shown by its fingerprint and, for a long secret, its last 4 characters.

CONNECTION_ID_PATTERN = r"^con_[a-z0-9]{1,60}$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._@:/-]*$"
MAX_SECRET_LENGTH = 8192
MAX_CONFIG_BYTES = 4096
# A secret travels in HTTP headers: visible ASCII only, no spaces (a pasted newline would
# otherwise reach the HTTP library, whose refusal repeats the value). A GitHub App's private
# key, in PEM, is the one secret with spaces and line breaks: it signs, and is never sent.
SECRET_PATTERN = r"^(?:[!-~]+|-----BEGIN [A-Z ]*PRIVATE KEY-----[!-~\s]+)$"
PEM_PREFIX = "-----BEGIN "
Secret = Annotated[str, Field(min_length=1, max_length=MAX_SECRET_LENGTH, pattern=SECRET_PATTERN)]


MAX_CONFIG_DEPTH = 8


def _texts(value: Any) -> Iterator[str]:
    """Every string of a JSON value, keys included, without recursion."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            yield from node.keys()
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _config(value: dict[str, Any]) -> dict[str, Any]:
    if json_depth(value) > MAX_CONFIG_DEPTH:
        raise PydanticCustomError(
            "config_too_deep",
            "config may be nested at most {limit} levels",
            {"limit": MAX_CONFIG_DEPTH},
        )
    if not all(_storable(t) for t in _texts(value)):
        raise PydanticCustomError(
            "config_unstorable", "config text may not hold NUL characters or lone surrogates"
        )
    if len(json.dumps(value)) > MAX_CONFIG_BYTES:
        raise PydanticCustomError(
            "config_too_large",
            "config may hold at most {limit} bytes of JSON",
            {"limit": MAX_CONFIG_BYTES},
        )
    return value


# What the schema says of an origin (``parse_origin``): http(s), a host (a DNS name, an IPv4
# address or a bracketed IPv6 address), an optional port, no user name, query or fragment;
# a base URL may go on with a path.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_AFTER_HOST = r"(?:[:/]|\s*$)"
_NAME = (
    rf"(?=[^:/\s]{{1,{MAX_NAME_LENGTH}}}\.?{_AFTER_HOST})"
    rf"(?:{_LABEL}\.)*(?![0-9]+\.?{_AFTER_HOST}){_LABEL}"
)
_HOST = rf"(?:{IPV4_PATTERN}|{_NAME})\.?|\[{IPV6_PATTERN}\]"
_PORT = (
    r"(?::(?:0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}"
    r"|655[0-2][0-9]|6553[0-5]))?)?"
)
_URL_START = r"^\s*[Hh][Tt][Tt][Pp][Ss]?://"
ORIGIN_PATTERN = rf"{_URL_START}(?:{_HOST}){_PORT}/?\s*$"
BASE_URL_PATTERN = rf"{_URL_START}(?:{_HOST}){_PORT}(?:/[^?#]*)?$"


def _types_schema(schema: JsonDict) -> None:
    """The installed connection types, and the rule that those with no origin of their own
    name one, as the schema of ``ConnectionCreate`` says them (computed when it is made)."""
    from schemas.registry import connection_kinds

    kinds = connection_kinds()
    properties = schema.get("properties")
    type_schema = properties.get("type") if isinstance(properties, dict) else None
    if isinstance(type_schema, dict):
        type_schema["enum"] = list[Any](sorted(kinds))
    must_name: list[Any] = sorted(
        k.name for k in kinds.values() if k.http and not k.default_base_url
    )
    schema["if"] = {"properties": {"type": {"enum": must_name}}}
    schema["then"] = {
        "required": ["config"],
        "properties": {
            "config": {"anyOf": [{"required": ["base_url"]}, {"required": ["allowed_origins"]}]}
        },
    }
    own: list[Any] = [
        {
            "if": {"required": ["type"], "properties": {"type": {"const": kind.name}}},
            "then": {"required": ["config"], "properties": {"config": inlined(kind.config_schema)}},
        }
        for kind in sorted(kinds.values(), key=lambda k: k.name)
        if kind.config_schema is not None
    ]
    if own:
        schema["allOf"] = own


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` references replaced by what they name (a schema set
    inside another document, whose root is not its own)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    inlined_schema: dict[str, Any] = walk(schema)
    return inlined_schema


CONFIG_SCHEMA: JsonDict = {
    "additionalProperties": marker(STORABLE_JSON),
    "propertyNames": {"pattern": STORABLE_TEXT_PATTERN, "not": {"pattern": SECRET_KEY_PATTERN}},
    "properties": {
        "base_url": {"anyOf": [{"type": "string", "pattern": BASE_URL_PATTERN}, {"type": "null"}]},
        "allowed_origins": {
            "anyOf": [
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_ALLOWED_ORIGINS,
                    "items": {"type": "string", "pattern": ORIGIN_PATTERN},
                },
                {"type": "null"},
            ]
        },
    },
}


class ConnectionCreate(BaseModel):
    """Body of ``POST /v1/connections``."""

    # A refused value may be the secret: the error text never shows it.
    model_config = ConfigDict(
        extra="forbid", hide_input_in_errors=True, json_schema_extra=_types_schema
    )

    type: ConnectionTypeName = Field(
        description="What the credential is for: a built-in type (webhook, slack, github, "
        "http_bearer) or one an installed package declares (GET /v1/capabilities lists the "
        "types each capability takes)."
    )
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    secret: Secret = Field(description="The credential. Never returned by any route.")
    config: Annotated[dict[str, Any], AfterValidator(_config)] = Field(
        default_factory=dict,
        description="What is not secret, e.g. `base_url` for a provider's self-hosted or "
        "enterprise API. Returned as given (`allowed_origins` normalized); a key that looks "
        "like a secret is refused. The secret is sent only to `allowed_origins` when given "
        "(absolute http(s) origins, no path), else to `base_url`'s origin, else to the "
        "provider's own (Slack, GitHub); `http_bearer` and `webhook` connections must name "
        "one of the two.",
        json_schema_extra=CONFIG_SCHEMA,
        examples=[
            {"base_url": "https://slack.com/api"},
            {"allowed_origins": ["https://api.example.com", "https://upload.example.com"]},
        ],
    )

    @model_validator(mode="after")
    def _bound_to_origins(self) -> ConnectionCreate:
        self.config = checked_origins(self.type, self.config)
        check_secret(self.type, self.config, self.secret)
        return self


def check_secret(type: str, config: Mapping[str, Any], secret: str) -> None:
    """A GitHub App connection's secret is an RSA private key in PEM; no other secret may
    hold spaces or line breaks. The refusal never repeats the secret."""
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if not holds_github_app(type, config):
        if secret.startswith(PEM_PREFIX):
            raise PydanticCustomError(
                "secret_not_a_token",
                "secret may hold spaces or line breaks only for a GitHub App connection "
                "(config app_id and installation_id), whose secret is the App's private key",
            )
        return
    try:
        key = load_pem_private_key(secret.strip().encode(), password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, RSAPrivateKey):
        raise PydanticCustomError(
            "github_app_key",
            "secret must be the GitHub App's private key as GitHub gives it: an RSA key in "
            "PEM (-----BEGIN RSA PRIVATE KEY-----), unencrypted; generate one in the App's "
            "settings",
        )


def checked_origins(type: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` checked by its type (``ConnectionKind.check_config``) and with
    ``allowed_origins`` normalized (and deduplicated); refused when the type is not
    installed, when ``base_url`` or an origin does not parse, when ``base_url`` lies outside
    ``allowed_origins``, or when a connection with no default origin names none."""

    def refuse(message: str, **context: Any) -> PydanticCustomError:
        return PydanticCustomError("connection_origins", message, context)

    kind = connection_kind(type)
    if kind is None:
        from schemas.registry import connection_kinds

        raise PydanticCustomError(
            "connection_type_unknown",
            "no connection type {type} is installed; the types are {known}",
            {"type": type, "known": ", ".join(sorted(connection_kinds()))},
        )
    if kind.check_config is not None:
        try:
            config = kind.check_config(config)
        except ValueError as err:
            if isinstance(err, PydanticCustomError):
                raise
            raise refuse("config: {why}", why=str(err)) from None
    if not kind.http:
        return config
    base = config.get("base_url")
    base_origin: Origin | None = None
    if base is not None:
        if not isinstance(base, str):
            raise refuse("config.base_url must be a URL string")
        try:
            base_origin = parse_origin(base, path_allowed=True)
        except ValueError as err:
            raise refuse("config.base_url {why}", why=str(err)) from None
    allowed = config.get("allowed_origins")
    if allowed is not None:
        if not isinstance(allowed, list) or not 1 <= len(allowed) <= MAX_ALLOWED_ORIGINS:
            raise refuse(
                "config.allowed_origins must be a list of 1 to {limit} origins",
                limit=MAX_ALLOWED_ORIGINS,
            )
        origins: list[Origin] = []
        for i, text in enumerate(allowed):
            if not isinstance(text, str):
                raise refuse("config.allowed_origins[{i}] must be a string", i=i)
            try:
                origins.append(parse_origin(text))
            except ValueError as err:
                raise refuse("config.allowed_origins[{i}] {why}", i=i, why=str(err)) from None
        if base_origin is not None and base_origin not in origins:
            raise refuse(
                "config.base_url's origin {origin} is not in config.allowed_origins",
                origin=str(base_origin),
            )
        config = {**config, "allowed_origins": list(dict.fromkeys(str(o) for o in origins))}
    elif base_origin is None and kind.default_base_url is None:
        raise refuse(
            "a {type} connection must name where its secret may be sent: config.base_url, or "
            "config.allowed_origins (a list of https://host[:port] origins)",
            type=type,
        )
    return config


class ConnectionRotate(BaseModel):
    """Body of ``POST /v1/connections/{id}/rotate``."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    secret: Secret


class ConnectionInfo(BaseModel):
    """A connection as every route answers it: never its secret."""

    id: str
    tenant_id: str
    type: str
    name: str
    config: dict[str, Any]
    fingerprint: str = Field(
        description="`hmac:` and the first 16 hex digits of the secret's HMAC-SHA256 under a "
        "key derived from the server key named by `key_id`: tells secrets apart without "
        "showing one or letting anyone without the server key test a guess against it."
    )
    last4: str = Field(
        description="The secret's last 4 characters ('' when it is shorter than 16)."
    )
    key_id: str = Field(description="The id of the key that seals the secret at rest.")
    created_at: datetime
    rotated_at: datetime | None = None
    revoked_at: datetime | None = None
    needs_reauth_at: datetime | None = Field(
        default=None,
        description="When the provider refused an OAuth 2 connection's grant for good: calls "
        "on it are refused (`connection_needs_reauth`) until it is connected again.",
    )
    needs_reauth_reason: str | None = None
