"""The one refusal type of the services: a stable ``code`` (the API's error code), a
message for people and ``details`` for programs. No HTTP status: the gateway maps codes to
statuses in one table, the CLI prints the message on one line."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class MoatError(Exception):
    """A request refused by a rule of Moat's."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic errors reduced to location, message and type (never the input value)."""
    return [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]
