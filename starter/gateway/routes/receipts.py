"""Receipt routes: one receipt, or pages of them (newest first, cursor pagination)."""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from schemas.api import ReceiptPage
from schemas.errors import ErrorCode
from schemas.ids import is_receipt_id
from schemas.records import ExecutionStatus, Receipt
from starter.gateway.deps import Caller, TenantSession
from starter.gateway.errors import EnvelopeJSONResponse as JSONResponse
from starter.gateway.errors import documented_errors
from starter.service import MoatError, prefixes
from store import db, receipts
from store.models import ReceiptRow

router = APIRouter()


@router.get(
    "/v1/receipts",
    tags=["receipts"],
    summary="List receipts, newest first",
    response_model=ReceiptPage,
    responses=documented_errors(400, 401, 500),
)
async def list_receipts(
    session: TenantSession,
    caller: Caller,
    capability_id: Annotated[str | None, Query(max_length=200)] = None,
    status: ExecutionStatus | None = None,
    idempotency_key: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    since: Annotated[
        str | None,
        Query(
            description="From this time on (inclusive); RFC 3339 with offset.",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    until: Annotated[
        str | None,
        Query(
            description="Before this time (exclusive); RFC 3339 with offset.",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=400, description="`next_cursor` of the previous page.")
    ] = None,
) -> JSONResponse:
    """The caller's receipts, filtered by capability, status, idempotency key and time range
    of the `timestamp` (when the execution was initiated); cursor pagination."""
    for value in (capability_id, idempotency_key):
        _refuse_nul(value)
    after = _decode_cursor(cursor) if cursor is not None else None
    where = receipts.ReceiptFilter(
        capability_id=capability_id,
        status=status.value if status else None,
        idempotency_key=idempotency_key,
        since=_rfc3339("since", since),
        until=_rfc3339("until", until),
    )
    rows = await receipts.list_receipts(
        session, caller.tenant_id, where, limit=limit + 1, after=after
    )
    page = ReceiptPage(
        items=rows[:limit],
        next_cursor=_encode_cursor(rows[limit - 1]) if len(rows) > limit else None,
    )
    return JSONResponse(page.model_dump(mode="json"))


def _refuse_nul(value: str | None) -> None:
    if value is not None and not db.storable(value):
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "Text may not hold NUL characters or lone surrogates.",
        )


_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$"
)


def _rfc3339(name: str, value: str | None) -> datetime | None:
    """An RFC 3339 date-time; the offset is required (a time without one is ambiguous)."""
    if value is None:
        return None
    try:
        if not _RFC3339.match(value):
            raise ValueError(value)
        text = value.upper().replace("Z", "+00:00")
        head, dot, tail = text.partition(".")
        if dot:  # Python takes at most 6 fraction digits
            digits = re.match(r"\d+", tail)
            assert digits is not None
            text = f"{head}.{digits.group()[:6].ljust(6, '0')}{tail[digits.end() :]}"
        return datetime.fromisoformat(text)
    except ValueError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"{name} must be an RFC 3339 date-time with an offset, e.g. 2026-11-25T10:00:00Z.",
            {
                "errors": [
                    {
                        "loc": ["query", name],
                        "msg": "not an RFC 3339 date-time",
                        "type": "datetime_parsing",
                    }
                ]
            },
        ) from err


def _encode_cursor(last: Receipt) -> str:
    raw = json.dumps([last.timestamp.isoformat(), last.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, receipt_id = json.loads(raw)
        at = datetime.fromisoformat(stamp)
        if at.tzinfo is None or not isinstance(receipt_id, str) or not db.storable(receipt_id):
            raise ValueError("malformed cursor")
    except (ValueError, TypeError) as err:
        raise MoatError(
            ErrorCode.INVALID_CURSOR, "The cursor is not one this API returned.", {"cursor": cursor}
        ) from err
    return at, receipt_id


@router.get(
    "/v1/receipts/{receipt_id}",
    tags=["receipts"],
    summary="One receipt",
    response_model=Receipt,
    responses=documented_errors(400, 401, 404, 500),
)
async def get_receipt(receipt_id: str, session: TenantSession, caller: Caller) -> Receipt:
    """A receipt of the caller's tenant, by its id or a prefix of it (6 characters or more)
    that starts no other; another tenant's is `receipt_not_found`."""
    if not is_receipt_id(receipt_id):
        whole = await prefixes.unique_id(
            session, ReceiptRow, caller.tenant_id, receipt_id, "receipt"
        )
        receipt_id = whole or receipt_id
    receipt = (
        await receipts.get_receipt(session, caller.tenant_id, receipt_id)
        if is_receipt_id(receipt_id)
        else None
    )
    if receipt is None:
        raise MoatError(ErrorCode.RECEIPT_NOT_FOUND, f"No receipt {receipt_id[:80]!r}.")
    return receipt
