"""Keyset pages: the rows after a sort key, in the list's order, at most ``limit``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import Select, tuple_
from sqlalchemy.orm import InstrumentedAttribute

T = TypeVar("T")


def keyset(
    stmt: Select[T],
    columns: Sequence[InstrumentedAttribute[Any]],
    after: tuple[Any, ...] | None,
    limit: int | None,
    *,
    newest_first: bool,
) -> Select[T]:
    """``stmt`` ordered by ``columns`` (descending when ``newest_first``), from the row
    after ``after`` on; every row when ``limit`` is None."""
    if after is not None:
        key, bound = tuple_(*columns), tuple_(*after)
        stmt = stmt.where(key < bound if newest_first else key > bound)
    stmt = stmt.order_by(*(c.desc() if newest_first else c for c in columns))
    return stmt.limit(limit) if limit is not None else stmt
