"""A Standard Webhooks receiver: takes ``POST`` on any path and keeps each delivery (its
``webhook-id``, ``webhook-timestamp``, ``webhook-signature`` and raw body), deduplicating on
``webhook-id`` as the specification asks receivers to: a repeated id is answered 200 and
is no second event. It does not check signatures: tests check them with the reference
library, so a wrong signature is caught by code Moat did not write.

``status_next`` makes the next deliveries answer that status without taking them (a 429 with
``Retry-After: retry_after``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starter.devstack.providers.server import FakeServer, Reply, Request


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def id(self) -> str:
        return self.headers.get("webhook-id", "")


class FakeWebhookReceiver(FakeServer):
    name = "webhook"

    def __init__(self) -> None:
        super().__init__()
        self.deliveries: list[Delivery] = []  # every attempt that arrived
        self.events: dict[str, Delivery] = {}  # one per webhook-id
        self.status_next: list[int] = []
        self.retry_after = 1

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.deliveries.clear()
            self.events.clear()
            self.status_next.clear()

    def state(self) -> dict[str, Any]:
        return {"events": [{"id": k, "path": d.path} for k, d in self.events.items()]}

    async def handle(self, request: Request) -> Reply:
        if request.method != "POST":
            return Reply(405, {"error": "POST only"})
        delivery = Delivery(request.path, dict(request.headers), request.body)
        with self.lock:
            self.deliveries.append(delivery)
            if self.status_next:
                status = self.status_next.pop(0)
                wait = {"Retry-After": str(self.retry_after)} if status == 429 else {}
                return Reply(status, {"error": "scripted refusal"}, wait)
            if not delivery.id:
                return Reply(400, {"error": "webhook-id missing"})
            if delivery.id in self.events:
                return Reply(200, {"ok": True, "duplicate": True})
            self.events[delivery.id] = delivery
            return self.acted(Reply(200, {"ok": True}))
