"""A tenant's webhook endpoint, written from the Standard Webhooks specification: it keeps
every request as received (headers, raw body) and answers scripted statuses per path."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

WAIT_SECONDS = 60.0  # a bound for a wait that should end much sooner, never a measurement


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookEndpoint:
    """ASGI app: ``script(path, 503, 503, 200)`` answers those in turn (the last repeats)."""

    base_url: str = ""
    received: list[Received] = field(default_factory=list)
    _scripts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    _retry_after: dict[str, str] = field(default_factory=dict)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def allow_entry(self) -> str:
        return self.base_url.removeprefix("http://")

    def script(self, path: str, *statuses: int, retry_after: str | None = None) -> str:
        self._scripts[path] = list(statuses)
        if retry_after is not None:
            self._retry_after[path] = retry_after
        return self.base_url + path

    def to(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def accepted(self, path: str) -> list[Received]:
        return [r for r in self.to(path) if 200 <= r.status < 300]

    async def wait_for(self, path: str, count: int, *, accepted: bool = True) -> list[Received]:
        """The first ``count`` (accepted) requests to ``path``, once they have arrived."""

        def enough() -> bool:
            seen = self.accepted(path) if accepted else self.to(path)
            return len(seen) >= count

        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(enough), WAIT_SECONDS)
        return (self.accepted(path) if accepted else self.to(path))[:count]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = await request.body()
        path = request.url.path
        steps = self._scripts[path]
        status = steps.pop(0) if len(steps) > 1 else (steps[0] if steps else 200)
        headers = {"retry-after": self._retry_after[path]} if path in self._retry_after else {}
        async with self._arrived:
            self.received.append(Received(path, dict(request.headers), body, status))
            self._arrived.notify_all()
        await Response(status_code=status, headers=headers)(scope, receive, send)
