"""A local stand-in for third-party providers (Slack, GitHub, tenant webhooks).

It behaves like the real ones where Moat cares: status codes, ``Retry-After``, slowness,
and ``Idempotency-Key`` dedupe as the IETF draft and Stripe-style APIs do it: a repeated key
gets the first response back and causes no second effect, and a repeat that arrives while the
first request with that key is still being processed gets 409 Conflict.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


@dataclass
class Step:
    """One scripted answer."""

    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


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
        self._replies: dict[str, tuple[int, Any]] = {}
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
            call.status, reply = self._replies[key]
            await JSONResponse(
                reply, status_code=call.status, headers={"Idempotent-Replayed": "true"}
            )(scope, receive, send)
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
                self._replies[key] = (step.status, step.body)
        response = JSONResponse(step.body, status_code=step.status, headers=step.headers)
        await response(scope, receive, send)
