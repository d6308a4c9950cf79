"""Canonical JSON (RFC 8785), redaction and ``sha256:`` digests.

Raw inputs and outputs are never stored: they are redacted (seed 000's key deny-list plus
well-known secret value formats), canonicalized, and only the digest is kept.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785

REDACTED = "[REDACTED]"
# JSON this deep is refused (input) or not recorded (a provider's output): real tool data is
# a few levels deep, and Temporal's serializers stop near 255 levels.
MAX_JSON_DEPTH = 64

REDACTED_KEY_PATTERNS: tuple[str, ...] = (
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "credentials",
    "bearer",
    "private_key",
    "privatekey",
    "access_key",
    "accesskey",
    "client_secret",
    "refresh_token",
)

# Values that are secrets whatever key they sit under.
SECRET_VALUE_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"\bBearer\s+[A-Za-z0-9\-._~+/]{8,}=*",
        r"\bBasic\s+[A-Za-z0-9+/]{8,}={0,2}",
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack tokens
        r"\bxapp-[A-Za-z0-9-]{10,}",
        r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
        r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}",  # OpenAI / Anthropic style keys
        r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
        r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API keys
        r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
        r"\bnpm_[A-Za-z0-9]{36}\b",
        r"\bmoat_[a-z0-9]+_[A-Za-z0-9_-]{20,}",  # our own API keys
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWTs
        r"://[^/\s:@]+:[^/\s@]+@",  # credentials in URLs
        r"/codec/ui/[A-Za-z0-9_-]{20,}",  # our codec endpoint's UI token, in a URL or path
    )
)


def is_secret_key(key: str) -> bool:
    """True when a JSON key names a secret (case-insensitive, partial match)."""
    lowered = key.lower()
    return any(pattern in lowered for pattern in REDACTED_KEY_PATTERNS)


def is_secret_value(value: str) -> bool:
    """True when a string looks like a credential of a well-known format."""
    return any(p.search(value) for p in SECRET_VALUE_PATTERNS)


def redact_text(text: str) -> str:
    """``text`` with every well-known secret value format replaced by ``[REDACTED]`` (for
    free text such as log lines, where there are no keys to go by)."""
    for pattern in SECRET_VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


def redact(value: Any) -> Any:
    """A deep copy of ``value`` with every secret replaced by ``"[REDACTED]"``."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str) and is_secret_value(value):
        return REDACTED
    return value


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


def redacted_hash(value: Any) -> str:
    """``sha256:`` of the canonical bytes of the redacted value."""
    return sha256_digest(canonical_bytes(redact(value)))
