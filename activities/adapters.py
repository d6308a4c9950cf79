"""Adapters: the only code that talks to third parties.

An adapter returns an ``AdapterOutput`` or raises ``ApplicationError`` whose ``type`` is an
``ErrorTaxonomy`` value and whose first detail carries the provider's HTTP status. 4xx
(but 408/429) are non-retryable; 429/503 honour ``Retry-After``. A 409 to a request that
may have been sent before (a retry, or a reset or resumed run) is retryable: under the IETF
Idempotency-Key draft a provider answers 409 while the request first sent with the same key
is still being processed, which is what happens when our earlier attempt timed out on our
side, or its run was terminated, while it was still running on theirs.

A failure's message is Moat's own wording and the exception's type, never a third-party
exception's text, and never chained to that exception: the text may repeat the request or
the answer (an HTTP library refusing a header quotes its value, a secret), and a message
reaches the logs, Temporal's history and the run manifest. Adapters keep no state between
calls (no cookie jar): one client serves every tenant.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.cookiejar
import json
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar, cast

import httpx
import rfc8785
from opentelemetry import propagate
from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from activities.connections import Scrubber, check_origin
from schemas.canonical import MAX_JSON_DEPTH, canonical_bytes, json_depth, sha256_digest
from schemas.capabilities import DEFAULT_MAX_RESPONSE_BYTES, HttpRequestInput
from schemas.connections import ConnectionType, Credential, origin_of
from schemas.hosts import (
    AllowEntry,
    admits_address,
    canonical_host,
    entry_for,
    literal_address,
    parse_allow_entry,
)
from schemas.names import PROVIDER_RESPONSE
from schemas.records import ErrorTaxonomy, taxonomy_for_http_status
from schemas.redaction import redact, redact_text
from schemas.run import MAX_RETRY_AFTER, AdapterInput, AdapterOutput

# An adapter is called with the run's input and, when the request named a connection, its
# decrypted credential (resolved by the activity for this one call, never stored).
Adapter = Callable[[AdapterInput, Credential | None], Awaitable[AdapterOutput]]

M = TypeVar("M", bound=BaseModel)

RETRYABLE_STATUSES = frozenset({408, 429})
RETRY_AFTER_STATUSES = frozenset({409, 429, 503})
IN_FLIGHT_STATUS = 409
INVALID_RESPONSE = "provider_invalid_response"


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that stores nothing: a cookie one tenant's provider set would otherwise
    be sent with the next tenant's call to the same address."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


def http_client(max_connections: int = 200) -> httpx.AsyncClient:
    """The HTTP client adapters share: no cookies kept, no redirects followed."""
    return httpx.AsyncClient(
        follow_redirects=False,
        cookies=_NoCookies(),
        limits=httpx.Limits(max_connections=max_connections),
    )


def fail(
    taxonomy: ErrorTaxonomy,
    message: str,
    *,
    code: str | None = None,
    http_status: int | None = None,
    retryable: bool = True,
    retry_after: timedelta | None = None,
    provider_response: Any = None,
) -> ApplicationError:
    """An adapter failure: ``type`` is its stable error code (the taxonomy value unless a more
    precise ``code`` is given); the details carry the taxonomy and the provider's status."""
    code = code or taxonomy.value
    details: dict[str, Any] = {
        "http_status": http_status,
        "taxonomy": taxonomy.value,
        "error_code": code,
    }
    if provider_response is not None:
        details[PROVIDER_RESPONSE] = provider_response
    return ApplicationError(
        message,
        details,
        type=code,
        non_retryable=not retryable,
        next_retry_delay=retry_after,
    )


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


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, as the system resolver gives them."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class HostGuard:
    """Refuses targets that are not public (see ``schemas.addresses``) unless an
    allow-list entry admits the host and port: by name, or by address for a name that
    resolves to it.

    ``check`` resolves a name once and returns the vetted address the request must then be
    sent to, so the name cannot resolve elsewhere between the check and the connection
    (DNS rebinding). An address literal, in any form a resolver reads (``2130706433``,
    ``127.1``, NAT64 ``64:ff9b::a.b.c.d``), is judged as the address it is, by the rule a
    webhook URL is checked with when it is subscribed (``schemas.hosts.admits_address``)."""

    def __init__(self, allow_hosts: Iterable[str], resolver: Resolver = resolve) -> None:
        self._allow = tuple(parse_allow_entry(h) for h in allow_hosts)
        self._resolve = resolver

    async def check(self, host: str, port: int, tenant_allow: Iterable[str] = ()) -> str | None:
        """The address to connect to; None for a host allow-listed by name (sent as is).
        ``tenant_allow`` adds the calling tenant's own entries to the worker's."""
        allow = self._allow + _entries(tenant_allow)
        host = canonical_host(host)
        if any(entry.admits(host, port) for entry in allow):
            return None
        literal = literal_address(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except OSError as err:
                # The resolver's own wording stays out of the failure, like every library's.
                raise fail(
                    ErrorTaxonomy.NETWORK_ERROR, f"cannot resolve {host} ({type(err).__name__})"
                ) from None
        if not addresses:
            raise fail(ErrorTaxonomy.NETWORK_ERROR, f"cannot resolve {host}: no address")
        for text in addresses:
            # Drop an IPv6 zone id; an IPv4-mapped address is judged as the IPv4 it reaches.
            address = literal_address(text)
            if address is None or not admits_address(address, port, allow):
                raise fail(
                    ErrorTaxonomy.GATEWAY_ERROR,
                    f"{host} resolves to non-public address {address or text}; an operator "
                    f"can allow-list {entry_for(host, port)} (MOAT_HTTP_ALLOW_HOSTS, or the "
                    "tenant's list) to allow it",
                    code="host_not_allowed",
                    retryable=False,
                )
        return addresses[0]


def _entries(texts: Iterable[str]) -> tuple[AllowEntry, ...]:
    """Parsed entries; one that does not parse (validated when written, so never expected)
    admits nothing."""
    entries = []
    for text in texts:
        try:
            entries.append(parse_allow_entry(text))
        except ValueError:
            continue
    return tuple(entries)


# Headers that describe this one connection or the message's framing, not the request:
# the HTTP client writes its own, and an agent's copy would travel beside them (two framings
# of one body, a second Host) or steer a proxy. Any header starting "proxy-" goes too.
DROPPED_HEADERS = frozenset(
    {
        "host",
        "transfer-encoding",
        "content-length",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "idempotency-key",  # Moat sends its own, derived from the execution
    }
)


def agent_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The agent's headers that may go out: none of ``DROPPED_HEADERS`` nor ``Proxy-*``,
    whatever their case."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() not in DROPPED_HEADERS and not name.lower().startswith("proxy-")
    }


class HttpAdapter:
    """``http.request``: one HTTP call, ``Idempotency-Key`` sent downstream. The answer's
    body is read up to ``max_response_bytes``; a larger one is cut (see ``_Body``).

    ``client`` should come from ``http_client``, which keeps no cookies."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        guard: HostGuard,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._client = client
        self._guard = guard
        self._max_response_bytes = max_response_bytes

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        req = _request(inp)
        headers = agent_headers(req.headers)
        if credential is not None and credential.type == ConnectionType.HTTP_BEARER:
            # The connection's token, never the agent's: it replaces any Authorization the
            # agent sent, whatever its case.
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = f"Bearer {credential.secret}"
        answer = await send(
            self._client,
            self._guard,
            req.method,
            str(req.url),
            headers=headers,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            max_response_bytes=self._max_response_bytes,
            json_body=req.json_body,
            idempotency_key=inp.idempotency_key,
            credential=credential,
        )
        return interpret(answer.response, answer.body, repeat=inp.repeat)


@dataclass(frozen=True)
class Answer:
    """A provider's answer: its status and headers, and what was read of its body."""

    response: httpx.Response
    body: _Body

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


async def send(
    client: httpx.AsyncClient,
    guard: HostGuard,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 - the HTTP client's own per-phase timeout
    allow_hosts: Iterable[str] = (),
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    json_body: Any = None,
    content: bytes | None = None,
    params: Mapping[str, str] | None = None,
    idempotency_key: str | None = None,
    credential: Credential | None = None,
) -> Answer:
    """One HTTP call to a target the host guard admits, sent to the address it vetted.

    Every adapter goes through here, so no base URL (an agent's, or a connection's) reaches
    a host ``http.request`` would refuse. A timeout or a transport failure is raised as a
    retryable ``timeout`` / ``network_error`` failure.

    A call that carries a connection's secret names its ``credential``: the call is refused
    (``connection_origin_mismatch``) unless the target's origin is one the connection names,
    and the answer comes back with the secret scrubbed (``activities.connections``). No
    redirect is followed (``http_client``), so the secret never follows one elsewhere."""
    target = httpx.URL(url)
    if target.scheme not in ("http", "https") or not target.host:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            "the target URL must be absolute http(s)",
            code="schema_validation_failed",
            retryable=False,
        )
    if credential is not None:
        check_origin(credential, origin_of(target.scheme, target.host, target.port))
    pinned = await guard.check(
        target.host, target.port or (443 if target.scheme == "https" else 80), allow_hosts
    )
    out_headers = dict(headers)
    extensions: dict[str, Any] = {}
    if pinned is not None:
        # Connect to the address the guard vetted; the provider still sees its own name
        # (Host header, and TLS server name, which the certificate is checked against).
        out_headers["Host"] = target.netloc.decode("ascii")
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        target = target.copy_with(host=pinned)
    if idempotency_key is not None:
        out_headers["Idempotency-Key"] = idempotency_key
    out_headers.setdefault("User-Agent", "moat/0.1")
    propagate.inject(out_headers)  # traceparent: the provider call joins the run's trace
    try:
        async with client.stream(
            method,
            target,
            headers=out_headers,
            json=json_body if json_body is not None and content is None else None,
            content=content,
            params=params,
            timeout=timeout,
            extensions=extensions,
        ) as response:
            # A refusal's body is read only as far as its details keep; leaving the rest
            # unread closes the connection.
            limit = (
                max_response_bytes
                if response.status_code < 300
                else min(max_response_bytes, ERROR_BODY_BYTES)
            )
            body = await _read(response, limit)
    except httpx.TimeoutException:
        raise fail(ErrorTaxonomy.TIMEOUT, f"no answer within {timeout}s") from None
    except httpx.HTTPError as err:
        raise fail(
            ErrorTaxonomy.NETWORK_ERROR,
            "the provider could not be reached, or its answer was not valid HTTP "
            f"({type(err).__name__})",
        ) from None
    if credential is not None:
        return _scrubbed(Answer(response, body), Scrubber(credential.secret))
    return Answer(response, body)


def _scrubbed(answer: Answer, scrubber: Scrubber) -> Answer:
    """The answer with the connection's secret replaced in its body and headers (a provider
    that echoes the request's ``Authorization``, or the token in a link)."""
    headers = answer.response.headers
    for name, value in list(headers.items()):
        clean = scrubber.text(value)
        if clean != value:
            headers[name] = clean
    body = answer.body
    content = scrubber.bytes(body.content, cut=body.truncated)
    if content == body.content:
        return answer
    return Answer(answer.response, replace(body, content=content))


def _request(inp: AdapterInput) -> HttpRequestInput:
    return parse_input(inp, HttpRequestInput)


def parse_input(inp: AdapterInput, model: type[M]) -> M:
    """The input, validated again: a run may have been started past the gateway's checks."""
    try:
        return model.model_validate(inp.input)
    except ValidationError as err:
        # Locations and types only: a refused value may be a secret.
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'} ({e['type']})" for e in err.errors()
        )
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"the input does not match {inp.capability.id}'s input schema: {where}",
            code="schema_validation_failed",
            retryable=False,
        ) from None


@dataclass(frozen=True)
class _Body:
    """What was read of an answer: all of it (``content``), or, past the limit, its first
    ``limit`` bytes (``truncated``) and how many bytes arrived before reading stopped.
    Reading stops there rather than running to the end, which may be gigabytes away."""

    content: bytes
    bytes_read: int
    sha256: str
    limit: int
    truncated: bool = False


async def _read(response: httpx.Response, limit: int) -> _Body:
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
                return _Body(cut, size, "sha256:" + digest.hexdigest(), limit, truncated=True)
    return _Body(b"".join(chunks), size, "sha256:" + digest.hexdigest(), limit)


def interpret(
    response: httpx.Response, body: _Body | None, *, repeat: bool = False
) -> AdapterOutput:
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


def _output(
    status: int, headers: httpx.Headers, body: _Body | None, encoding: str
) -> AdapterOutput:
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


def _provider_said(body: _Body | None, encoding: str) -> Any:
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
        code=INVALID_RESPONSE,
        http_status=status,
        retryable=False,
    )


async def echo_adapter(inp: AdapterInput, credential: Credential | None = None) -> AdapterOutput:
    """``demo.echo``: offline, returns its input."""
    return recorded(None, inp.input)
