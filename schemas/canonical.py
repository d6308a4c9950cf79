"""Canonical JSON (RFC 8785) and ``sha256:`` digests: the bytes Moat hashes and signs, and
how deep a JSON value it accepts.

What is hashed of an input or output is its redacted form (``schemas.redaction``), so raw
values are never stored; this module only turns a JSON value into bytes and digests.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

# JSON this deep is refused (input) or not recorded (a provider's output): real tool data is
# a few levels deep, and Temporal's serializers stop near 255 levels.
MAX_JSON_DEPTH = 64


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        stack.extend((child, depth + 1) for child in children)
    return deepest


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value. Raises ``rfc8785.CanonicalizationError``
    for values outside I-JSON (e.g. integers beyond 2**53, NaN)."""
    return rfc8785.dumps(value)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
