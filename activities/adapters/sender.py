"""The one way a provider is called: ``send``, an HTTP request to a target the host guard
admits, its answer read up to a limit and a connection's secret scrubbed from what comes
back.

Adapters keep no state between calls (no cookie jar): one client serves every tenant.
"""

from __future__ import annotations

import http.cookiejar
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
from opentelemetry import propagate

from activities.adapters.base import fail
from activities.adapters.guard import HostGuard
from activities.adapters.responses import ERROR_BODY_BYTES, ProviderResponse, read_body
from activities.connections import Scrubber, check_origin
from schemas.capabilities import DEFAULT_MAX_RESPONSE_BYTES
from schemas.connections import Credential, origin_of
from schemas.errors import ErrorCode
from schemas.records import ErrorTaxonomy


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


@dataclass(frozen=True)
class SendRequest:
    """One call to a provider, as an adapter asks for it.

    ``timeout`` is the HTTP client's own per-phase timeout. ``allow_hosts`` adds the calling
    tenant's allow-list entries to the worker's. The body is ``content`` when given, else
    ``json_body`` as JSON. ``idempotency_key`` goes out as ``Idempotency-Key``. A call that
    carries a connection's secret names its ``credential``."""

    method: str
    url: str
    headers: Mapping[str, str]
    timeout: float
    allow_hosts: Iterable[str] = ()
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    json_body: Any = None
    content: bytes | None = None
    params: Mapping[str, str] | None = None
    idempotency_key: str | None = None
    credential: Credential | None = None


@dataclass(frozen=True)
class _Outgoing:
    """The request as it goes on the wire: where it connects, and with what headers."""

    target: httpx.URL
    headers: dict[str, str]
    extensions: dict[str, Any]


async def send(
    client: httpx.AsyncClient, guard: HostGuard, request: SendRequest
) -> ProviderResponse:
    """One HTTP call to a target the host guard admits, sent to the address it vetted.

    Every adapter goes through here, so no base URL (an agent's, or a connection's) reaches
    a host ``http.request`` would refuse. A timeout or a transport failure is raised as a
    retryable ``timeout`` / ``network_error`` failure.

    A call that carries a connection's secret names its ``credential``: the call is refused
    (``connection_origin_mismatch``) unless the target's origin is one the connection names,
    and the answer comes back with the secret scrubbed (``activities.connections``). No
    redirect is followed (``http_client``), so the secret never follows one elsewhere."""
    target = _target(request)
    port = target.port or (443 if target.scheme == "https" else 80)
    pinned = await guard.check(target.host, port, request.allow_hosts)
    answer = await _exchange(client, request, _outgoing(request, target, pinned))
    if request.credential is not None:
        return _scrubbed(answer, Scrubber(request.credential.secret))
    return answer


def _target(request: SendRequest) -> httpx.URL:
    """The request's URL: absolute http(s), and of an origin its credential names."""
    target = httpx.URL(request.url)
    if target.scheme not in ("http", "https") or not target.host:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            "the target URL must be absolute http(s)",
            code=ErrorCode.SCHEMA_VALIDATION_FAILED,
            retryable=False,
        )
    if request.credential is not None:
        check_origin(request.credential, origin_of(target.scheme, target.host, target.port))
    return target


def _outgoing(request: SendRequest, target: httpx.URL, pinned: str | None) -> _Outgoing:
    """Where the request connects (``pinned``, the address the guard vetted, when there is
    one) and the headers it carries there."""
    headers = dict(request.headers)
    extensions: dict[str, Any] = {}
    if pinned is not None:
        # Connect to the address the guard vetted; the provider still sees its own name
        # (Host header, and TLS server name, which the certificate is checked against).
        headers["Host"] = target.netloc.decode("ascii")
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        target = target.copy_with(host=pinned)
    if request.idempotency_key is not None:
        headers["Idempotency-Key"] = request.idempotency_key
    headers.setdefault("User-Agent", "moat/0.1")
    propagate.inject(headers)  # traceparent: the provider call joins the run's trace
    return _Outgoing(target, headers, extensions)


async def _exchange(
    client: httpx.AsyncClient, request: SendRequest, out: _Outgoing
) -> ProviderResponse:
    """The request sent and its answer read; no answer, or no valid HTTP, is a failure."""
    try:
        async with client.stream(
            request.method,
            out.target,
            headers=out.headers,
            json=request.json_body if request.content is None else None,
            content=request.content,
            params=request.params,
            timeout=request.timeout,
            extensions=out.extensions,
        ) as response:
            body = await read_body(response, _read_limit(request, response.status_code))
    except httpx.TimeoutException:
        raise fail(ErrorTaxonomy.TIMEOUT, f"no answer within {request.timeout}s") from None
    except httpx.HTTPError as err:
        raise fail(
            ErrorTaxonomy.NETWORK_ERROR,
            "the provider could not be reached, or its answer was not valid HTTP "
            f"({type(err).__name__})",
        ) from None
    return ProviderResponse(response, body)


def _read_limit(request: SendRequest, status: int) -> int:
    """How much of the answer is read: a refusal's body only as far as its details keep;
    leaving the rest unread closes the connection."""
    if status < 300:
        return request.max_response_bytes
    return min(request.max_response_bytes, ERROR_BODY_BYTES)


def _scrubbed(answer: ProviderResponse, scrubber: Scrubber) -> ProviderResponse:
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
    return ProviderResponse(answer.response, replace(body, content=content))
