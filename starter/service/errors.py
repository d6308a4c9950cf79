"""The one refusal type of the services: a stable ``code`` (the API's error code), a
message for people and ``details`` for programs. No HTTP status: the gateway maps codes to
statuses in one table, the CLI prints the message on one line."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from schemas.errors import ErrorCode

if TYPE_CHECKING:
    from schemas.capabilities import CapabilityCatalog


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


def capability_not_found(
    catalog: CapabilityCatalog, capability_id: str, version: str | None = None, then: str = ""
) -> MoatError:
    """No such capability (or version); a mistyped id is answered with the catalog's nearest
    one, in the message and as ``details.did_you_mean``."""
    details: dict[str, Any] = {"capability_id": capability_id}
    message = f"No capability {capability_id!r}" + (f" at version {version}" if version else "")
    nearest = catalog.closest(capability_id) if catalog.get(capability_id) is None else None
    if nearest is not None:
        details["did_you_mean"] = nearest
        message += f"; did you mean {nearest!r}?"
    else:
        message += "."
    return MoatError(
        ErrorCode.CAPABILITY_NOT_FOUND, message + (f" {then}" if then else ""), details
    )
