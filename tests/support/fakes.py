"""A local stand-in for third-party providers (Slack, GitHub, tenant webhooks).

It behaves like the real ones where Moat cares: status codes, ``Retry-After``, slowness,
and ``Idempotency-Key`` dedupe as the IETF draft and Stripe-style APIs do it: a repeated key
gets the first response back and causes no second effect, and a repeat that arrives while the
first request with that key is still being processed gets 409 Conflict.

``RawProvider`` answers bytes that are not valid HTTP, for what a library makes of them.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

CHUNK = 64 * 1024


@dataclass
class Step:
    """One scripted answer: ``body`` as JSON, or ``raw`` bytes as they are, or a body of
    ``stream_bytes`` bytes sent in chunks and never held whole."""

    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    stream_bytes: int = 0


@dataclass
class Call:
    path: str
    method: str
    headers: dict[str, str]
    body: Any
    at: float
    status: int | None = None  # what the provider answered; None until it has
    query: str = ""  # the query string as sent, undecoded
    # Every header line as received, repeats included (``headers`` keeps one per name).
    raw_headers: list[tuple[str, str]] = field(default_factory=list)


class FakeProvider:
    """ASGI app. Script answers per path with ``script``; unscripted paths answer 200."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.effects: list[Call] = []
        self._scripts: dict[str, list[Step]] = defaultdict(list)
        self._replies: dict[str, Step] = {}
        self._in_flight: set[str] = set()
        self.base_url = ""

    @property
    def allow_entry(self) -> str:
        """The allow-list entry (``127.0.0.1:<port>``) that lets Moat call this provider."""
        return self.base_url.removeprefix("http://")

    def script(self, path: str, *steps: Step) -> str:
        """Queue answers for ``path`` (the last one repeats); returns the full URL."""
        self._scripts[path] = list(steps)
        return self.base_url + path

    def calls_to(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]

    def effects_on(self, path: str) -> list[Call]:
        return [c for c in self.effects if c.path == path]

    def statuses(self, path: str) -> list[int | None]:
        return [c.status for c in self.calls_to(path)]

    def _next(self, path: str) -> Step:
        steps = self._scripts.get(path)
        if not steps:
            return Step()
        return steps.pop(0) if len(steps) > 1 else steps[0]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        call = Call(
            request.url.path,
            request.method,
            dict(request.headers),
            body,
            asyncio.get_running_loop().time(),
            query=request.url.query,
            raw_headers=[
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
            ],
        )
        self.calls.append(call)
        key = request.headers.get("idempotency-key")
        if key and key in self._replies:
            first = self._replies[key]
            call.status = first.status
            replay = self._response(first, {"Idempotent-Replayed": "true"})
            await replay(scope, receive, send)
            return
        if key and key in self._in_flight:
            call.status = 409
            await JSONResponse(
                {
                    "error": "idempotency_key_in_use",
                    "message": "a request with this key is in progress",
                },
                status_code=409,
            )(scope, receive, send)
            return
        step = self._next(call.path)
        if key:
            self._in_flight.add(key)
        try:
            if step.delay:
                await asyncio.sleep(step.delay)
        finally:
            self._in_flight.discard(key or "")
        call.status = step.status
        if step.status < 300:
            self.effects.append(call)
            if key:
                self._replies[key] = step
        await self._response(step, step.headers)(scope, receive, send)

    def _response(self, step: Step, headers: dict[str, str]) -> Response:
        if step.stream_bytes:
            return StreamingResponse(
                self._stream(step.stream_bytes),
                status_code=step.status,
                headers=headers,
                media_type="application/octet-stream",
            )
        if step.raw is not None:
            return Response(
                step.raw, status_code=step.status, headers=headers, media_type="application/json"
            )
        return JSONResponse(step.body, status_code=step.status, headers=headers)

    @staticmethod
    async def _stream(size: int) -> AsyncIterator[bytes]:
        chunk = b"x" * CHUNK
        sent = 0
        while sent < size:
            part = chunk[: size - sent]
            yield part
            sent += len(part)


class RawProvider:
    """A loopback TCP server that reads a request's head and answers ``answer`` as it is."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.requests = 0
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawProvider:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            writer.write(self.answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
