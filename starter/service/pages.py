"""Cursor pages for the services' lists: read the cursor a client sent back, and cut a page
of ``limit + 1`` rows into the page and the cursor of the next."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from schemas.errors import ErrorCode
from schemas.pages import KeyPart, decode_cursor, encode_cursor
from starter.service.errors import MoatError

T = TypeVar("T")


def after(cursor: str | None, kinds: tuple[type, ...]) -> tuple[KeyPart, ...] | None:
    """The sort key to start after; ``invalid_cursor`` for one this API did not give."""
    if cursor is None:
        return None
    try:
        return decode_cursor(cursor, kinds)
    except ValueError as err:
        raise MoatError(
            ErrorCode.INVALID_CURSOR,
            "The cursor is not one this API returned: pass the `next_cursor` of the previous "
            "page unchanged, or leave it out to start from the first page.",
            {"cursor": cursor[:100]},
        ) from err


def cut(rows: Sequence[T], limit: int, key: Callable[[T], tuple[KeyPart, ...]]) -> dict[str, Any]:
    """``items`` and ``next_cursor`` of a page read with ``limit + 1`` rows."""
    items = list(rows[:limit])
    more = len(rows) > limit
    return {"items": items, "next_cursor": encode_cursor(key(items[-1])) if more else None}
