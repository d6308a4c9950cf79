"""A refused form's problems as a person reads them: the API's error code and message, and
each field's problem on a line of its own (where, then what), never the value sent."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from schemas.errors import ErrorCode
from starter.service import MoatError, field_errors


@dataclass(frozen=True)
class Problems:
    code: str
    message: str
    items: tuple[str, ...] = field(default=())


def _where(loc: list[str]) -> str:
    where = ""
    for part in loc:
        where += f"[{part}]" if part.isdigit() else (f".{part}" if where else part)
    return where


def _lines(errors: object) -> tuple[str, ...]:
    if not isinstance(errors, list):
        return ()
    lines = []
    for error in errors:
        if isinstance(error, dict):
            where = _where([str(p) for p in error.get("loc", ())])
            msg = str(error.get("msg", ""))
            lines.append(f"{where}: {msg}" if where else msg)
    return tuple(lines)


def problems_of(err: ValidationError | MoatError) -> Problems:
    """What the API would answer for ``err``, for a page: a form that the body model
    refuses is ``schema_validation_failed`` with its fields' errors, as the API's
    validation answers."""
    if isinstance(err, ValidationError):
        return Problems(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The request is not valid.",
            _lines(field_errors(err.errors(include_input=False))),
        )
    return Problems(err.code, err.message, _lines(err.details.get("errors")))
