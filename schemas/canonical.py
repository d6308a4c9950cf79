"""Canonical JSON (RFC 8785), redaction and ``sha256:`` digests.

Raw inputs and outputs are never stored: they are redacted (a deny-list of secret key names
plus well-known secret value formats), canonicalized, and only the digest is kept.

URLs inside strings are redacted piece by piece, so a record still says where a call went:
userinfo, the values of query (and fragment) parameters whose names are secret, and the
secret path of well-known incoming-webhook URLs become ``[REDACTED]``; every other byte
is kept, so a URL without secrets is unchanged and its hash stays stable.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import unquote_plus

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
    "cookie",
    "set-cookie",
    "session",
)

# Query (and fragment) parameter names that are secrets only in a URL, where short names
# are the norm: signed-URL signatures (Azure SAS ``sig``, CloudFront ``Signature``), API
# keys (Google ``key``), OAuth authorization codes. Matched whole, case-insensitively; the
# key deny-list above also applies, by substring (``access_token``, ``X-Amz-Credential``).
URL_SECRET_PARAMS: frozenset[str] = frozenset(
    {"key", "sig", "signature", "code", "auth", "pass", "pwd", "jwt", "otp"}
)
URL_SECRET_PARAM_PATTERNS: tuple[str, ...] = (*REDACTED_KEY_PATTERNS, "signature")

# Incoming-webhook URLs whose path is the credential: (host, the public start of the path).
# Whatever follows that start is replaced; scheme, host and the start are kept.
WEBHOOK_URLS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(host, re.IGNORECASE), re.compile(path, re.IGNORECASE))
    for host, path in (
        (r"hooks\.slack\.com", r"/(?:services|triggers|workflows)/"),
        (r"(?:[a-z0-9-]+\.)?discord(?:app)?\.com", r"/api(?:/v\d+)?/webhooks/"),
        (r"[a-z0-9-]+\.webhook\.office\.com", r"/webhookb2/"),
        (r"outlook\.office(?:365)?\.com", r"/webhook/"),
        (r"hooks\.zapier\.com", r"/hooks/catch/"),
        (r"maker\.ifttt\.com", r"/trigger/[^/]+/with/key/"),
    )
)

# A URL in free text: a scheme, ``://``, and everything up to whitespace or a delimiter
# that cannot be part of it unescaped.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_AUTHORITY_END = re.compile(r"[/?#]")

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


def is_secret_param(name: str) -> bool:
    """True when a URL query or fragment parameter (its decoded name) holds a secret."""
    lowered = name.lower()
    return lowered in URL_SECRET_PARAMS or any(p in lowered for p in URL_SECRET_PARAM_PATTERNS)


def redact_urls(text: str) -> str:
    """``text`` with the secret parts of every URL in it replaced by ``[REDACTED]``; all
    other characters are kept as they are."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: _redact_url(m.group()), text)


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    userinfo, _, hostport = authority.rpartition("@")
    if userinfo and userinfo != REDACTED:
        # A user name alone is often the token itself (``https://<token>@host/``).
        authority = f"{REDACTED}@{hostport}"
    tail, hash_, fragment = tail.partition("#")
    path, question, query = tail.partition("?")
    path = _redact_webhook_path(_hostname(hostport), path)
    query = _redact_params(query)
    # OAuth's implicit flow returns ``#access_token=…`` in the fragment.
    fragment = _redact_params(fragment)
    return f"{scheme}://{authority}{path}{question}{query}{hash_}{fragment}"


def _hostname(hostport: str) -> str:
    if hostport.startswith("["):
        return hostport[1:].partition("]")[0]
    return hostport.rpartition(":")[0] if ":" in hostport else hostport


def _redact_webhook_path(host: str, path: str) -> str:
    for host_pattern, path_pattern in WEBHOOK_URLS:
        if host_pattern.fullmatch(host):
            start = path_pattern.match(path)
            if start and path[start.end() :] not in ("", REDACTED):
                return path[: start.end()] + REDACTED
    return path


def _redact_params(params: str) -> str:
    """``a=1&b=2`` with the values of secret parameters replaced; a value that is not
    secret may itself hold a URL (``?next=https://…``), redacted in turn."""
    if "=" not in params:
        return params
    parts = []
    for part in params.split("&"):
        name, eq, value = part.partition("=")
        if eq and value and value != REDACTED and is_secret_param(unquote_plus(name)):
            value = REDACTED
        elif eq:
            value = redact_urls(value)
        parts.append(f"{name}{eq}{value}")
    return "&".join(parts)


_MAX_TEXT_PASSES = 8


def redact_text(text: str) -> str:
    """``text`` with every well-known secret value format replaced by ``[REDACTED]`` (for
    free text such as log lines, where there are no keys to go by), and the secret parts
    of every URL in it."""
    # URLs first: a value pattern rewrites ``://user:pw@`` and the URL would no longer
    # be recognised, with its query still in clear. A replacement can complete a pattern
    # that was not there before (``://://user:pw@user:pw@``), so the passes repeat until
    # nothing changes: redacting redacted text changes nothing.
    for _ in range(_MAX_TEXT_PASSES):
        before = text
        text = redact_urls(text)
        for pattern in SECRET_VALUE_PATTERNS:
            text = pattern.sub(REDACTED, text)
        if text == before:
            break
    return text


def redact_string(value: str) -> str:
    """A string as ``redact`` leaves it: ``[REDACTED]`` when it holds a secret value of a
    well-known format, else with the secret parts of its URLs replaced."""
    if is_secret_value(value):
        return REDACTED
    redacted = redact_urls(value)
    # Cutting a URL apart must not leave behind a value pattern the whole did not show.
    return REDACTED if redacted != value and is_secret_value(redacted) else redacted


def redact(value: Any) -> Any:
    """A deep copy of ``value`` with every secret replaced by ``"[REDACTED]"``."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_string(value)
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
