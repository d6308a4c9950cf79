"""Connections: a tenant's credential for one provider, stored once and named by id.

An agent's request and a run's history carry only the connection's id. The secret is
decrypted by the adapter activity at the moment of the call and handed to the adapter as a
``Credential``, which never reaches Temporal, a log line or a record."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError


class ConnectionType(StrEnum):
    WEBHOOK = "webhook"
    SLACK = "slack"
    GITHUB = "github"
    HTTP_BEARER = "http_bearer"


@dataclass(frozen=True)
class Credential:
    """A decrypted connection, alive for one adapter call."""

    connection_id: str
    type: ConnectionType
    secret: str = field(repr=False)
    config: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: str = ""


class ConnectionResolver(Protocol):
    """Resolves and decrypts a tenant's connection under that tenant's row-level security.

    Raises ``ApplicationError`` (non-retryable) with error code ``connection_not_found``
    (absent, or another tenant's) or ``connection_revoked``."""

    async def resolve(self, tenant_id: str, connection_id: str) -> Credential: ...


# What the API takes and answers. The secret is taken, never answered: a connection is
# shown by its fingerprint and, for a long secret, its last 4 characters.

CONNECTION_ID_PATTERN = r"^con_[a-z0-9]{1,60}$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._@:/-]*$"
MAX_SECRET_LENGTH = 8192
MAX_CONFIG_BYTES = 4096
# A secret travels in HTTP headers: visible ASCII only (a pasted newline would otherwise
# reach the HTTP library, whose refusal repeats the value).
_SECRET = re.compile(r"^[!-~]+$")


def _secret(value: str) -> str:
    if not _SECRET.fullmatch(value):
        raise PydanticCustomError(
            "secret_invalid",
            "the secret may hold visible ASCII characters only, without spaces: remove "
            "white space (often a newline pasted with it) and non-ASCII characters",
        )
    return value


Secret = Annotated[str, Field(min_length=1, max_length=MAX_SECRET_LENGTH), AfterValidator(_secret)]


def _config(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value)) > MAX_CONFIG_BYTES:
        raise PydanticCustomError(
            "config_too_large",
            "config may hold at most {limit} bytes of JSON",
            {"limit": MAX_CONFIG_BYTES},
        )
    return value


class ConnectionCreate(BaseModel):
    """Body of ``POST /v1/connections``."""

    # A refused value may be the secret: the error text never shows it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    type: ConnectionType
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    secret: Secret = Field(description="The credential. Never returned by any route.")
    config: Annotated[dict[str, Any], AfterValidator(_config)] = Field(
        default_factory=dict,
        description="What is not secret, e.g. `base_url` for a provider's self-hosted or "
        "enterprise API. Returned as given; a key that looks like a secret is refused.",
        examples=[{"base_url": "https://slack.com/api"}],
    )


class ConnectionRotate(BaseModel):
    """Body of ``POST /v1/connections/{id}/rotate``."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    secret: Secret


class ConnectionInfo(BaseModel):
    """A connection as every route answers it: never its secret."""

    id: str
    tenant_id: str
    type: ConnectionType
    name: str
    config: dict[str, Any]
    fingerprint: str = Field(
        description="`sha256:` and the first 16 hex digits of the "
        "secret's SHA-256: tells secrets apart without showing one."
    )
    last4: str = Field(
        description="The secret's last 4 characters ('' when it is shorter than 16)."
    )
    key_id: str = Field(description="The id of the key that seals the secret at rest.")
    created_at: datetime
    rotated_at: datetime | None = None
    revoked_at: datetime | None = None
