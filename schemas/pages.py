"""Pages of a list: the items, and an opaque cursor to the next page (null on the last).

Every list of the API is read in pages: ``limit`` (each route's default and maximum; over
the maximum is refused) and ``cursor`` (the previous page's ``next_cursor``). A cursor is
the sort key of the last item sent, so a page never repeats or skips an item when others
are added meanwhile.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from schemas.api import ApiKeyInfo, TenantInfo
from schemas.approvals import Approval
from schemas.connections import ConnectionInfo
from schemas.policy import PolicyVersion
from schemas.probes import ProbeInfo

T = TypeVar("T")
KeyPart = datetime | str | int
# The sort key of a list's item: where the next page starts.
Key = tuple[KeyPart, ...]
MAX_CURSOR_LENGTH = 400


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque cursor of the next page (pass it as `cursor`); null on the last.",
    )


class ProbePage(Page[ProbeInfo]):
    """The tenant's probes, oldest first."""


class ConnectionPage(Page[ConnectionInfo]):
    """The tenant's connections, revoked ones included, oldest first."""


class ApprovalPage(Page[Approval]):
    """Approvals, newest first."""


class PolicyVersionPage(Page[PolicyVersion]):
    """Policy versions, newest first."""


class TenantPage(Page[TenantInfo]):
    """Tenants, oldest first."""


class ApiKeyPage(Page[ApiKeyInfo]):
    """A tenant's API keys (never their secrets), oldest first."""


def encode_cursor(key: tuple[KeyPart, ...]) -> str:
    parts = [p.isoformat() if isinstance(p, datetime) else p for p in key]
    raw = json.dumps(parts, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: tuple[type, ...]) -> tuple[KeyPart, ...]:
    """The sort key a cursor holds, of the given kinds; ValueError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (ValueError, TypeError) as err:
        raise ValueError("malformed cursor") from err
    if not isinstance(parts, list) or len(parts) != len(kinds):
        raise ValueError("malformed cursor")
    key: list[KeyPart] = []
    for kind, part in zip(kinds, parts, strict=True):
        if kind is datetime and isinstance(part, str):
            at = datetime.fromisoformat(part)
            if at.tzinfo is None:
                raise ValueError("malformed cursor")
            key.append(at)
        elif kind is int and isinstance(part, int) and not isinstance(part, bool):
            if not -(2**63) <= part < 2**63:
                raise ValueError("malformed cursor")
            key.append(part)
        elif kind is str and isinstance(part, str) and len(part) <= 300 and "\x00" not in part:
            key.append(part)
        else:
            raise ValueError("malformed cursor")
    return tuple(key)
