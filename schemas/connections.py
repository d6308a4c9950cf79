"""Connections: a tenant's credential for one provider, stored once and named by id.

An agent's request and a run's history carry only the connection's id. The secret is
decrypted by the adapter activity at the moment of the call and handed to the adapter as a
``Credential``, which never reaches Temporal, a log line or a record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


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
