"""The chaos campaign's third-party provider: the test suite's fake (``Idempotency-Key``
dedupe, 409 while a key is in flight, the first answer replayed), with faults drawn at
random on the requests that would cause an effect, and the effects counted per key.

Faults, as real providers show them:

* ``500``: a server error before anything happened;
* ``429``: rate limited, with ``Retry-After``;
* ``slow``: the effect happens, but only after the caller's timeout has passed;
* ``drop``: the effect happens, then the connection breaks before the answer is whole.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect

from tests.support.fakes import FakeProvider, Step

SLOW, DROP = "slow", "drop"
DROP_MARK = b'"drop":true'


@dataclass(frozen=True)
class Faults:
    """The share of effect-causing requests that meet each fault."""

    server_error: float = 0.04
    rate_limited: float = 0.04
    slow: float = 0.01
    drop: float = 0.03
    slow_seconds: float = 32.0  # past http.request's 30 s timeout
    retry_after_seconds: int = 1

    def scaled(self, factor: float) -> Faults:
        return Faults(
            self.server_error * factor,
            self.rate_limited * factor,
            self.slow * factor,
            self.drop * factor,
            self.slow_seconds,
            self.retry_after_seconds,
        )


class ChaosProvider(FakeProvider):
    """ASGI app. Every request carries the campaign's key in its JSON body (``key``), so
    effects are counted per campaign key whatever ``Idempotency-Key`` Moat derived."""

    def __init__(self, faults: Faults, seed: int) -> None:
        super().__init__()
        self.faults = faults
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._dropping: set[int] = set()

    def _next(self, path: str) -> Step:
        f, draw = self.faults, self._rng.random()
        if (draw := draw - f.server_error) < 0:
            self.injected["500"] += 1
            return Step(status=500, body={"error": "internal"})
        if (draw := draw - f.rate_limited) < 0:
            self.injected["429"] += 1
            return Step(
                status=429,
                body={"error": "rate_limited"},
                headers={"Retry-After": str(f.retry_after_seconds)},
            )
        if (draw := draw - f.slow) < 0:
            self.injected[SLOW] += 1
            return Step(delay=f.slow_seconds)
        if draw - f.drop < 0:
            self.injected[DROP] += 1
            return Step(body={"ok": True, DROP: True})
        return Step()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        replay = False

        async def maybe_drop(message: dict[str, Any]) -> None:
            # A fresh effect drawn as ``drop``: the status line and a few bytes of the body
            # go out, then the connection is cut (uvicorn closes it when the app stops
            # mid-body). Its replay, later, is whole.
            nonlocal replay
            if message["type"] == "http.response.start":
                replay = any(
                    name.lower() == b"idempotent-replayed" for name, _ in message["headers"]
                )
            elif not replay and DROP_MARK in message.get("body", b""):
                await send({"type": "http.response.body", "body": b"{", "more_body": True})
                raise _Dropped
            await send(message)

        try:
            await super().__call__(scope, receive, maybe_drop)
        except (_Dropped, ClientDisconnect):  # a caller that timed out before it sent all
            return

    def effects_by_key(self) -> dict[str, list[str]]:
        """Campaign key → the ``Idempotency-Key`` of each effect it caused."""
        found: dict[str, list[str]] = defaultdict(list)
        for call in self.effects:
            key = call.body.get("key") if isinstance(call.body, dict) else None
            found[str(key)].append(call.headers.get("idempotency-key", ""))
        return found


class _Dropped(Exception):
    """Ends the app mid-answer on purpose."""
