"""A fake of Acme's ticket API for tests (the package's own, as a provider's fake should
be): tickets with an ``external_ref``, lost answers, a rate limit with ``Retry-After`` and
server failures, and the conformance kit's ``ProviderFake`` over it."""

from __future__ import annotations

import itertools
from typing import Any

from moat.testing.providers import FakeServer, Reply, Request


class FakeAcme(FakeServer):
    name = "acme"

    def __init__(self) -> None:
        super().__init__()
        self.tickets: list[dict[str, Any]] = []
        self.tokens: set[str] | None = None  # None: any token is good
        self.rate_limit_next = 0
        self.retry_after = 1
        self.fail_with_next = 0  # the next creations answer 503, creating nothing
        self._ids = itertools.count(1)

    async def handle(self, request: Request) -> Reply:
        with self.lock:
            token = request.bearer()
            if not token or (self.tokens is not None and token not in self.tokens):
                return Reply(401, {"error": "unauthorized"})
            if request.path != "/tickets":
                return Reply(404, {"error": "not_found"})
            if request.method == "GET":
                ref = request.query.get("external_ref")
                return Reply(
                    200, {"tickets": [t for t in self.tickets if t["external_ref"] == ref]}
                )
            if request.method != "POST":
                return Reply(405, {"error": "method_not_allowed"})
            if self.rate_limit_next > 0:
                self.rate_limit_next -= 1
                return Reply(429, {"error": "slow_down"}, {"Retry-After": str(self.retry_after)})
            if self.fail_with_next > 0:
                self.fail_with_next -= 1
                return Reply(503, {"error": "maintenance"})
            return self._create(request.json() or {})

    def _create(self, args: dict[str, Any]) -> Reply:
        if not args.get("subject") or not args.get("customer_id"):
            return Reply(422, {"error": "invalid", "fields": ["subject", "customer_id"]})
        number = next(self._ids)
        ticket = {
            "id": f"T-{number}",
            "url": f"{self.base_url}/tickets/T-{number}",
            "subject": args["subject"],
            "customer_id": args["customer_id"],
            "external_ref": args.get("external_ref"),
        }
        self.tickets.append(ticket)
        return self.acted(Reply(201, ticket))


class AcmeConformanceFake:
    """``moat.testing.ProviderFake`` over ``FakeAcme``: tickets are the effects."""

    def __init__(self, fake: FakeAcme) -> None:
        self.fake = fake

    @property
    def allow_entry(self) -> str:
        return self.fake.allow_entry

    def effects(self) -> int:
        with self.fake.lock:
            return len(self.fake.tickets)

    def lose_answers(self, count: int) -> None:
        self.fake.fail_next(count)

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        with self.fake.lock:
            self.fake.rate_limit_next = count
            self.fake.retry_after = retry_after_seconds
        return True

    def refuse(self, count: int) -> None:
        with self.fake.lock:
            self.fake.fail_with_next = count

    def call_times(self) -> list[float]:
        with self.fake.lock:
            return [r.at for r in self.fake.requests if r.method == "POST" and r.path == "/tickets"]
