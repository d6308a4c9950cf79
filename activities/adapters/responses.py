"""A provider's response: its body read up to a limit, the output an agent gets back, and
what a refusal means for a retry.

4xx (but 408/429) are non-retryable; 429/503 honour ``Retry-After``. A 409 to a request
that may have been sent before (a retry, or a reset or resumed run) is retryable: under the
IETF Idempotency-Key draft a provider answers 409 while the request first sent with the same
key is still being processed, which is what happens when our earlier attempt timed out on
our side, or its run was terminated, while it was still running on theirs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, cast

import httpx
import rfc8785
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail
from schemas.canonical import MAX_JSON_DEPTH, canonical_bytes, json_depth, sha256_digest
from schemas.errors import ErrorCode
from schemas.provider_evidence import ProviderEvidence
from schemas.records import ErrorTaxonomy, taxonomy_for_http_status
from schemas.redaction import redact, redact_text
from schemas.run import MAX_RETRY_AFTER, AdapterOutput

RETRYABLE_STATUSES = frozenset({408, 429})
RETRY_AFTER_STATUSES = frozenset({409, 429, 503})
IN_FLIGHT_STATUS = 409

# The response headers an agent gets back: what it needs to act on the answer (where the
# created thing is, its version, when to come back, how to page, what is left of its rate);
# never cookies or anything that authenticates.
OUTPUT_HEADERS = frozenset(
    {
        "content-type",
        "location",
        "etag",
        "last-modified",
        "retry-after",
        "x-request-id",
        "link",
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    }
)
# The most of a refusal's body its details keep (a provider's error is a few fields).
ERROR_BODY_BYTES = 4096


@dataclass(frozen=True)
class Body:
    """What was read of an answer: all of it (``content``), or, past the limit, its first
    ``limit`` bytes (``truncated``) and how many bytes arrived before reading stopped.
    Reading stops there rather than running to the end, which may be gigabytes away."""

    content: bytes
    bytes_read: int
    sha256: str
    limit: int
    truncated: bool = False


async def read_body(response: httpx.Response, limit: int) -> Body:
    """The response's body, read up to ``limit`` bytes."""
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    size = 0
    # Closed when reading stops early (httpx declares an iterator; it is a generator).
    chunks_in = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
    async with aclosing(chunks_in) as stream:
        async for chunk in stream:
            digest.update(chunk)
            size += len(chunk)
            chunks.append(chunk)
            if size > limit:
                cut = b"".join(chunks)[:limit]
                return Body(cut, size, "sha256:" + digest.hexdigest(), limit, truncated=True)
    return Body(b"".join(chunks), size, "sha256:" + digest.hexdigest(), limit)


@dataclass(frozen=True)
class ProviderResponse:
    """A provider's answer: its status and headers, and what was read of its body."""

    response: httpx.Response
    body: Body

    @property
    def status(self) -> int:
        return self.response.status_code

    def json(self) -> Any:
        """The body as JSON; None when it is not JSON (or was cut)."""
        if self.body.truncated or not self.body.content:
            return None
        try:
            return json.loads(self.body.content)
        except (ValueError, RecursionError):
            return None

    def said(self) -> Any:
        """The body as a failure's details keep it (redacted, bounded)."""
        return _provider_said(self.body, self.response.encoding or "utf-8")


def parse_retry_after(value: str | None, now: datetime | None = None) -> timedelta | None:
    """``Retry-After`` as delay-seconds or an HTTP-date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        delay = timedelta(seconds=int(value))
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delay = when - (now or datetime.now(UTC))
    return max(timedelta(0), min(delay, MAX_RETRY_AFTER))


def interpret(
    response: httpx.Response, body: Body | None, *, repeat: bool = False
) -> AdapterOutput:
    """A 2xx as the output an agent gets back; any other status as the failure it means."""
    status = response.status_code
    encoding = response.encoding or "utf-8"
    if status < 300:
        return _output(status, response.headers, body, encoding)
    retry_after = (
        parse_retry_after(response.headers.get("retry-after"))
        if status in RETRY_AFTER_STATUSES
        else None
    )
    said = _provider_said(body, encoding)
    if repeat and status == IN_FLIGHT_STATUS:
        # Our earlier request is still running at the provider: its outcome is not known yet.
        raise fail(
            ErrorTaxonomy.TIMEOUT,
            "provider is still processing the earlier attempt with this Idempotency-Key (HTTP 409)",
            http_status=status,
            retry_after=retry_after,
            provider_response=said,
        )
    taxonomy = taxonomy_for_http_status(status)
    retryable = status >= 500 or status in RETRYABLE_STATUSES
    raise fail(
        taxonomy,
        f"provider answered HTTP {status}",
        http_status=status,
        retryable=retryable,
        retry_after=retry_after,
        provider_response=said,
    )


def _output(status: int, headers: httpx.Headers, body: Body | None, encoding: str) -> AdapterOutput:
    """``{status, headers, body}``: the body as JSON when it is recordable JSON, else as
    text; a body cut at the limit is its first ``limit_bytes`` as text, with ``truncated:
    true``, how many bytes arrived before reading stopped and their sha256."""
    output: dict[str, Any] = {
        "status": status,
        "headers": {
            name: value for name, value in headers.items() if name.lower() in OUTPUT_HEADERS
        },
        "body": None,
    }
    content = body.content if body is not None else b""
    if body is not None and body.truncated:
        output["body"] = _text(content, encoding)
        output.update(
            truncated=True,
            limit_bytes=body.limit,
            bytes_read=body.bytes_read,
            bytes_read_sha256=body.sha256,
        )
        return recorded(status, output, truncated=True)
    if content:
        try:
            value = json.loads(content)
        except RecursionError:
            raise _too_deep(status) from None
        except ValueError:
            value = _text(content, encoding)
        if json_depth(value) > MAX_JSON_DEPTH:
            raise _too_deep(status)
        output["body"] = value
    try:
        return recorded(status, output)
    except rfc8785.CanonicalizationError:
        # JSON outside I-JSON (integers beyond 2^53, NaN, lone surrogates): kept as text is.
        output["body"] = _text(content, encoding)
        return recorded(status, output)


def _text(content: bytes, encoding: str) -> str:
    """A body as text, its secrets redacted in place (free text has no keys to go by, and
    redacting the whole string would hide the rest of the page)."""
    # A cut may split a character; "replace" marks it rather than failing.
    return redact_text(content.decode(encoding, errors="replace"))


def recorded(status: int | None, value: Any, *, truncated: bool = False) -> AdapterOutput:
    """The output redacted, and its hash: sha256 of exactly the redacted output's RFC 8785
    bytes, so anyone holding the output can check it against the receipt."""
    output = redact(value)
    return AdapterOutput(
        http_status=status,
        output=output,
        output_hash=sha256_digest(canonical_bytes(output)),
        truncated=truncated,
    )


def answered(
    out: AdapterOutput, body: Body, provider: str, object_id: str | None = None
) -> AdapterOutput:
    """``out`` with the provider's evidence of an HTTP answer: its status and the SHA-256 of
    its bytes (none for an answer cut at the limit, whose end was never read)."""
    evidence = ProviderEvidence(
        provider=provider,
        object_type="response",
        object_id=object_id,
        http_status=out.http_status,
        response_sha256=None if body.truncated else body.sha256,
    )
    return out.model_copy(update={"evidence": evidence})


def _provider_said(body: Body | None, encoding: str) -> Any:
    """A refusal's body for the failure's details: its JSON (error fields and all) or its
    text, redacted; None when empty. A body past ``ERROR_BODY_BYTES`` is its first bytes
    as text."""
    if body is None or not body.content:
        return None
    content = body.content[:ERROR_BODY_BYTES]
    if not body.truncated and len(body.content) <= ERROR_BODY_BYTES:
        try:
            value = json.loads(content)
            if json_depth(value) <= MAX_JSON_DEPTH:
                canonical_bytes(value)
                return redact(value)
        except (ValueError, RecursionError, rfc8785.CanonicalizationError):
            pass
    return _text(content, encoding)


def _too_deep(status: int) -> ApplicationError:
    # Not retried: the call took effect, and a repeat would only be answered the same.
    return fail(
        ErrorTaxonomy.UNKNOWN,
        f"the provider answered HTTP {status} with JSON nested deeper than {MAX_JSON_DEPTH} "
        "levels, which Moat does not record; the call may have taken effect",
        code=ErrorCode.PROVIDER_INVALID_RESPONSE,
        http_status=status,
        retryable=False,
    )
