"""The conformance kit's view of Moat's own provider fakes (``starter.devstack.providers``):
each a thin ``ProviderFake`` over a ``FakeServer``, counting the effects the provider holds
and the calls that reached its effect endpoint, and making it lose answers, rate-limit or
refuse. ``FakeIdempotentApi`` is a provider for ``http.request``: an API that dedupes on
``Idempotency-Key`` as the IETF draft asks.

``FakeServer``, ``Reply`` and ``Request`` are the base an adapter package's own HTTP fake is
built on (``examples/acme-crm``)."""

from __future__ import annotations

import itertools
from typing import Any

from starter.devstack.providers import (
    FakeGithub,
    FakeServer,
    FakeSlack,
    FakeWebhookReceiver,
    Reply,
    Request,
)

__all__ = [
    "FakeIdempotentApi",
    "FakeServer",
    "GithubConformanceFake",
    "IdempotentApiConformanceFake",
    "Reply",
    "Request",
    "SlackConformanceFake",
    "WebhookConformanceFake",
]


class _OverServer:
    """What every HTTP fake shares: the allow-list entry, lost answers, and the times of
    the calls to the effect endpoint (a path ending in ``effect_path``, with ``method``)."""

    def __init__(self, server: FakeServer, effect_path: str, method: str = "POST") -> None:
        self.server = server
        self.effect_path = effect_path
        self.method = method

    @property
    def allow_entry(self) -> str:
        return self.server.allow_entry

    def lose_answers(self, count: int) -> None:
        self.server.fail_next(count)

    def call_times(self) -> list[float]:
        with self.server.lock:
            return [
                r.at
                for r in self.server.requests
                if r.method == self.method and r.path.endswith(self.effect_path)
            ]


class SlackConformanceFake(_OverServer):
    """``FakeSlack``: messages posted (``chat.postMessage``) or deleted (``chat.delete``)."""

    def __init__(self, fake: FakeSlack, method: str = "chat.postMessage") -> None:
        super().__init__(fake, method)
        self.fake = fake

    def effects(self) -> int:
        with self.fake.lock:
            if self.effect_path == "chat.delete":
                return sum(len(ts) for ts in self.fake.deletions.values())
            return sum(
                1 for ms in self.fake.messages.values() for m in ms if m.get("bot_id") is not None
            )

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.fake.lock:
            self.fake.rate_limit_next = count
            self.fake.retry_after = retry_after_seconds
        return True

    def refuse(self, count: int) -> None:
        """The next ``count`` writes answer Slack's ``internal_error``."""
        with self.fake.lock:
            self.fake.error_next[:] = ["internal_error"] * count


class GithubConformanceFake(_OverServer):
    """``FakeGithub``: issues created (``POST …/issues``) or closings (``PATCH …/issues/N``)."""

    def __init__(self, fake: FakeGithub, closing: bool = False) -> None:
        super().__init__(fake, "", "PATCH" if closing else "POST")
        self.fake = fake
        self.closing = closing

    def call_times(self) -> list[float]:
        with self.fake.lock:
            return [
                r.at
                for r in self.fake.requests
                if r.method == self.method and "/issues" in r.path and r.path.startswith("/repos/")
            ]

    def effects(self) -> int:
        with self.fake.lock:
            if self.closing:
                return sum(self.fake.closes.values())
            return sum(len(issues) for issues in self.fake.issues.values())

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """GitHub's secondary rate limit: 403 with ``Retry-After``."""
        with self.fake.lock:
            self.fake.secondary_limit_next = count
            self.fake.retry_after = retry_after_seconds
        return True

    def refuse(self, count: int) -> None:
        """The next ``count`` issue calls answer 500."""
        with self.fake.lock:
            self.fake.error_next[:] = [500] * count


class WebhookConformanceFake(_OverServer):
    """``FakeWebhookReceiver``: events taken (one per ``webhook-id``)."""

    def __init__(self, fake: FakeWebhookReceiver) -> None:
        super().__init__(fake, "")
        self.fake = fake

    def effects(self) -> int:
        with self.fake.lock:
            return len(self.fake.events)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.fake.lock:
            self.fake.status_next[:] = [429] * count
            self.fake.retry_after = retry_after_seconds
        return True

    def refuse(self, count: int) -> None:
        with self.fake.lock:
            self.fake.status_next[:] = [500] * count


class FakeIdempotentApi(FakeServer):
    """An API that creates a record per ``POST`` and dedupes on ``Idempotency-Key``: a
    repeated key is answered the first answer again (``Idempotent-Replayed: true``) and
    creates nothing. ``rate_limit_next`` calls are refused 429 with ``Retry-After``;
    ``refuse_next`` calls answer 503. ``GET`` answers the records."""

    name = "idempotent-api"

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, dict[str, Any]] = {}  # by Idempotency-Key
        self.rate_limit_next = 0
        self.retry_after = 1
        self.refuse_next = 0
        self._ids = itertools.count(1)

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.records.clear()
            self.rate_limit_next = self.refuse_next = 0

    def state(self) -> dict[str, Any]:
        return {"records": list(self.records.values())}

    async def handle(self, request: Request) -> Reply:
        with self.lock:
            if request.method == "GET":
                return Reply(200, {"records": list(self.records.values())})
            if request.method != "POST":
                return Reply(405, {"error": "method_not_allowed"})
            if self.rate_limit_next > 0:
                self.rate_limit_next -= 1
                return Reply(429, {"error": "rate_limited"}, {"Retry-After": str(self.retry_after)})
            if self.refuse_next > 0:
                self.refuse_next -= 1
                return Reply(503, {"error": "unavailable"})
            key = request.headers.get("idempotency-key", "")
            if key and key in self.records:
                return Reply(201, self.records[key], {"Idempotent-Replayed": "true"})
            record = {"id": next(self._ids), "path": request.path, "body": request.json()}
            self.records[key or f"no-key-{record['id']}"] = record
            return self.acted(Reply(201, record))


class IdempotentApiConformanceFake(_OverServer):
    """``FakeIdempotentApi``: records created."""

    def __init__(self, fake: FakeIdempotentApi) -> None:
        super().__init__(fake, "")
        self.fake = fake

    def effects(self) -> int:
        with self.fake.lock:
            return len(self.fake.records)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.fake.lock:
            self.fake.rate_limit_next = count
            self.fake.retry_after = retry_after_seconds
        return True

    def refuse(self, count: int) -> None:
        with self.fake.lock:
            self.fake.refuse_next = count
