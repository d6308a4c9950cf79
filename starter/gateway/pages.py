"""The query parameters of every paginated list: ``limit`` (1 to ``MAX_LIMIT`` unless a
route says otherwise; more is refused with ``schema_validation_failed``) and ``cursor``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from schemas.pages import MAX_CURSOR_LENGTH, Key

DEFAULT_LIMIT = 50
MAX_LIMIT = 200

Limit = Annotated[
    int, Query(ge=1, le=MAX_LIMIT, description=f"Most items in the page (1 to {MAX_LIMIT}).")
]
Cursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_LENGTH,
        description="`next_cursor` of the previous page; leave it out for the first page.",
    ),
]


def by_creation(item: Any) -> Key:
    """The sort key of a list ordered by creation: time, then id."""
    return (item.created_at, item.id)
