"""The gateway's ASGI layers: ``Boundary`` around every request (its span and trace id,
the body size limit, the last resort against faults) and CORS for the codec paths only."""

from __future__ import annotations

import logging

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.errors import ErrorCode
from schemas.names import TRACE_HEADER
from starter.gateway.answering import keep_send
from starter.gateway.errors import error_response, gateway_error
from starter.runtime import observability
from starter.runtime.availability import RETRY_AFTER_SECONDS, away
from starter.runtime.observability import current_trace_id

log = logging.getLogger("moat.gateway")


class _HeadersGetter(Getter[Scope]):
    """An ASGI scope's headers as the carrier of W3C trace context (``traceparent``,
    ``tracestate``, ``baggage``), read without building a request object."""

    def get(self, carrier: Scope, key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        found = [v.decode("latin-1") for k, v in carrier.get("headers", []) if k == name]
        return found or None

    def keys(self, carrier: Scope) -> list[str]:
        return [k.decode("latin-1") for k, _ in carrier.get("headers", [])]


_HEADERS = _HeadersGetter()

# What is read (and dropped) of a refused body beyond the limit before the 413 goes out, so
# a client still sending reads the answer instead of a reset connection; past it the 413
# goes out at once, and the server drops the rest as it comes (the connection stays open).
DRAIN_BYTES = 32 * 1024 * 1024


class Boundary:
    """Outermost ASGI layer of the gateway (inside Starlette's own error middleware).

    - opens the request's span, so every answer, error or not, carries its trace id (also
      as the ``X-Moat-Trace-Id`` header);
    - refuses bodies over ``max_body_bytes`` with 413 before anything works on them (the
      refused body is read to its end, up to ``DRAIN_BYTES``, before the answer: a client
      that answers only once it has sent everything reads the 413, not a reset);
    - answers a dependency briefly away (PostgreSQL, Temporal: ``runtime.availability``)
      with ``503 unavailable`` and ``Retry-After``, and any other uncaught fault with the
      ``gateway_error`` envelope, logged with the trace id, never with a stack trace in the
      answer.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.tracer = observability.tracer("moat.gateway")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Named by the route's template once routed ("GET /v1/receipts/{receipt_id}"): a raw
        # path may hold a credential (the codec's UI token) and has unbounded cardinality.
        # A caller's ``traceparent`` makes the request a span of the caller's trace.
        with self.tracer.start_as_current_span(
            f"{scope['method']} (unrouted)",
            context=propagate.extract(scope, getter=_HEADERS),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": scope["method"]},
            record_exception=False,
        ) as span:
            trace_id = current_trace_id()
            started = False

            async def send_traced(message: Message) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                    headers = list(message.get("headers", []))
                    headers.append((TRACE_HEADER.lower().encode(), trace_id.encode()))
                    message = {**message, "headers": headers}
                await send(message)

            try:
                replay = await self._read_body(scope, receive)
                if replay is None:
                    too_large = error_response(
                        ErrorCode.PAYLOAD_TOO_LARGE,
                        f"The body is over {self.max_body_bytes} bytes.",
                        {"max_body_bytes": self.max_body_bytes},
                        trace_id=trace_id,
                    )
                    await too_large(scope, receive, send_traced)
                    return
                keep_send(scope, send_traced)  # a copy may be answered by another task
                await self.app(scope, replay, send_traced)
            except Exception as err:
                dependency = away(err)
                if dependency is None:
                    log.exception("internal error (trace %s)", trace_id)
                else:
                    log.warning(
                        "%s unavailable (trace %s): %s", dependency, trace_id, type(err).__name__
                    )
                if started:
                    raise  # the answer is under way; only dropping the connection is left
                refusal = (
                    gateway_error(trace_id)
                    if dependency is None
                    else unavailable(dependency, trace_id)
                )
                await refusal(scope, receive, send_traced)
            finally:
                route = scope.get("route")
                if route is not None and hasattr(route, "path"):
                    span.update_name(f"{scope['method']} {route.path}")
                    span.set_attribute("http.route", route.path)

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive | None:
        """The request with its body read up front (at most ``max_body_bytes``), or None
        when the body is larger."""
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit():
                length = int(value)
                if length > self.max_body_bytes + DRAIN_BYTES:
                    return None  # not worth reading: answer, and let the server close
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # http.disconnect: hand it on as the last message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._drain(receive, message, size)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        pending = [message]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        return replay

    async def _drain(self, receive: Receive, message: Message, size: int) -> None:
        """Read (and drop) the rest of a refused body, up to ``DRAIN_BYTES``, so a client
        still sending it can read the 413 instead of a reset connection."""
        while message.get("more_body", False) and size <= self.max_body_bytes + DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))


def unavailable(dependency: str, trace_id: str) -> ASGIApp:
    """The answer while ``dependency`` is away: retry after ``Retry-After`` seconds, with
    the same idempotency key (nothing runs twice)."""
    return error_response(
        ErrorCode.UNAVAILABLE,
        f"Moat's {dependency} is briefly unavailable; retry in {RETRY_AFTER_SECONDS} s with "
        "the same idempotency key (the request is never run twice).",
        {"dependency": dependency, "retry_after_seconds": RETRY_AFTER_SECONDS},
        trace_id=trace_id,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


class CodecCors:
    """CORS for the codec paths (under ``prefix``) only, for the configured origins (the
    Temporal UI's); every other route stays same-origin."""

    def __init__(self, app: ASGIApp, origins: list[str], prefix: str) -> None:
        self.app = app
        self.prefix = prefix.rstrip("/") + "/"
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["POST"],
            allow_headers=["Content-Type", "X-Namespace", "Authorization"],
            allow_credentials=True,
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
