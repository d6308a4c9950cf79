"""Time-ordered identifiers (UUID v7, RFC 9562) without a dependency."""

from __future__ import annotations

import os
import re
import time
import uuid


def uuid7() -> uuid.UUID:
    """A UUID v7: 48 bits of Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


# A receipt id as the gateway issues it (a UUID in its lower-case text form).
RECEIPT_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_RECEIPT_ID = re.compile(RECEIPT_ID_PATTERN)


def is_receipt_id(text: object) -> bool:
    """True when ``text`` has the form of a receipt id (whether or not one exists)."""
    return isinstance(text, str) and _RECEIPT_ID.fullmatch(text) is not None
