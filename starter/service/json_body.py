"""Request bodies as JSON that RFC 8785 can canonicalize: I-JSON (RFC 7493), so no member
name twice in one object.

Python's parser keeps the last of duplicated members, so ``{"x": 1, "x": 2}`` and
``{"x": 2}`` would share one canonical form and one ``input_hash``: two different requests
under one idempotency key's answer. A body naming a member twice is ``bad_json``, naming
the member and where it is (a JSON Pointer, RFC 6901).

The check rides on the C parser (a hook per object, about twice the parse); only a body
found to hold a duplicate is parsed a second time, to say where.
"""

from __future__ import annotations

import json
from typing import Any

from schemas.errors import ErrorCode
from starter.service.errors import MoatError


class DuplicateMember(ValueError):
    """An object of the body names ``member`` twice."""

    def __init__(self, member: str) -> None:
        super().__init__(member)
        self.member = member


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateMember(name)
            seen.add(name)
    return obj


def loads(body: bytes | str) -> Any:
    """The body's JSON value; ``DuplicateMember`` for an object naming a member twice,
    ``ValueError`` (or ``RecursionError``) for text that is not JSON, as ``json.loads``."""
    return json.loads(body, object_pairs_hook=_unique)


def parse(body: bytes | str) -> Any:
    """The body's JSON value, or ``bad_json``: not JSON, or a member named twice."""
    try:
        return loads(body)
    except DuplicateMember as dup:
        raise duplicate_member(body, dup.member) from dup
    except (ValueError, RecursionError) as err:
        raise MoatError(ErrorCode.BAD_JSON, f"The body is not valid JSON: {err}") from err


def duplicate_member(body: bytes | str, member: str) -> MoatError:
    """The ``bad_json`` of a body naming ``member`` twice, with where (the first object, in
    document order, that names one of its members twice)."""
    found = _first_duplicate(body)
    name, pointer = found if found is not None else (member, "")
    shown = name if len(name) <= 80 else name[:80] + "…"
    return MoatError(
        ErrorCode.BAD_JSON,
        f"The body names the member {shown!r} twice"
        + (f" (at {pointer[:200]!r})" if pointer else " (at the top level)")
        + ": JSON objects must have unique member names (I-JSON, RFC 7493); send it once.",
        {"member": shown, "pointer": pointer[:200]},
    )


class _Pairs(list[tuple[str, Any]]):
    """An object as parsed, every member kept."""


def _first_duplicate(body: bytes | str) -> tuple[str, str] | None:
    """The first duplicated member name and its JSON Pointer, walking the document in
    order (iteratively: the depth is the parser's to bound)."""
    try:
        doc = json.loads(body, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, pointer = stack.pop()
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for name, _ in value:
                if name in seen:
                    return name, f"{pointer}/{_escape(name)}"
                seen.add(name)
            stack.extend((v, f"{pointer}/{_escape(k)}") for k, v in reversed(value))
        elif isinstance(value, list):
            stack.extend((v, f"{pointer}/{i}") for i, v in reversed(list(enumerate(value))))
    return None


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
