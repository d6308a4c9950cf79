"""A fake of Resend's email API, from its public reference: ``POST /emails`` with a Bearer
API key, answering ``{"id"}``; errors as ``{"statusCode", "message", "name"}``.

``Idempotency-Key`` (1 to 256 characters, kept 24 hours): a repeat with the same payload is
answered with the first email's id and sends nothing; with another payload, 409
``invalid_idempotent_request`` (Resend's 409 ``concurrent_idempotent_requests`` needs two
requests handled at once: this fake handles one at a time). Other errors: 400
``invalid_idempotency_key``, 401 ``missing_api_key``, 403 ``invalid_api_key`` (a key not
starting ``re_``), 422 ``missing_required_field``, 429 ``rate_limit_exceeded`` with
``retry-after``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from starter.devstack.providers.server import FakeServer, Reply, Request

MAX_KEY = 256
REQUIRED = ("from", "to", "subject")


def _error(status: int, name: str, message: str, **headers: str) -> Reply:
    return Reply(status, {"statusCode": status, "message": message, "name": name}, headers)


class FakeResend(FakeServer):
    name = "resend"

    def __init__(self) -> None:
        super().__init__()
        self.emails: list[dict[str, Any]] = []  # every email sent, with its id
        self.call_times: list[float] = []  # time.monotonic() of every POST /emails
        self.rate_limit_next = 0
        self.retry_after = 1
        self._keys: dict[str, tuple[Any, str]] = {}  # key → (payload, email id)

    def reset(self) -> None:
        with self.lock:
            super().reset()
            self.emails.clear()
            self.call_times.clear()
            self._keys.clear()
            self.rate_limit_next = 0

    def state(self) -> dict[str, Any]:
        return {"emails": self.emails}

    async def handle(self, request: Request) -> Reply:
        if request.path != "/emails" or request.method != "POST":
            return _error(404, "not_found", "The requested endpoint does not exist.")
        with self.lock:
            self.call_times.append(time.monotonic())
        token = request.bearer()
        if not token:
            return _error(401, "missing_api_key", "Missing API key in the authorization header.")
        if not token.startswith("re_"):
            return _error(403, "invalid_api_key", "API key is invalid.")
        with self.lock:
            if self.rate_limit_next > 0:
                self.rate_limit_next -= 1
                return _error(
                    429,
                    "rate_limit_exceeded",
                    "Too many requests. You can only make 2 requests per second.",
                    **{"retry-after": str(self.retry_after)},
                )
        return self._send(request)

    def _send(self, request: Request) -> Reply:
        payload = request.json()
        key = request.headers.get("idempotency-key")
        if key is not None and not 1 <= len(key) <= MAX_KEY:
            return _error(400, "invalid_idempotency_key", "The key must be between 1-256 chars.")
        with self.lock:
            if key is not None and key in self._keys:
                first, email_id = self._keys[key]
                if first != payload:
                    return _error(
                        409,
                        "invalid_idempotent_request",
                        "Same idempotency key used with a different request payload.",
                    )
                return Reply(200, {"id": email_id})
        if not isinstance(payload, dict) or any(not payload.get(f) for f in REQUIRED):
            missing = next(
                f for f in REQUIRED if not isinstance(payload, dict) or not payload.get(f)
            )
            return _error(422, "missing_required_field", f"Missing `{missing}` field.")
        email_id = str(uuid.uuid4())
        with self.lock:
            self.emails.append({"id": email_id, **payload})
            if key is not None:
                self._keys[key] = (payload, email_id)
        return self.acted(Reply(200, {"id": email_id}))
