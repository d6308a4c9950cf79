"""``webhook.post``: one Standard Webhooks delivery.

The body is ``{"type", "timestamp", "data"}``; the headers are ``webhook-id`` (the
execution's downstream key, the same on every retry and reset, so the receiver dedupes on
it), ``webhook-timestamp`` (this attempt's, in Unix seconds) and ``webhook-signature``:
``v1,`` and the base64 HMAC-SHA256, keyed with the connection's ``whsec_`` secret, of
``{id}.{timestamp}.{body}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from datetime import UTC, datetime

import httpx

from activities.adapters.base import fail, parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.reconcile import credential_of
from activities.adapters.responses import answered, interpret
from activities.adapters.sender import SendRequest, send
from schemas.capabilities import WebhookPostInput
from schemas.connections import ConnectionType, Credential
from schemas.errors import ErrorCode
from schemas.records import ErrorTaxonomy
from schemas.run import AdapterInput, AdapterOutput

SECRET_PREFIX = "whsec_"


def signing_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_<base64>`` secret stands for."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            "the webhook connection's secret is not a Standard Webhooks secret "
            "(whsec_ followed by base64): rotate it to one",
            code=ErrorCode.CONNECTION_INVALID,
            retryable=False,
        ) from None


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class WebhookAdapter:
    def __init__(self, client: httpx.AsyncClient, guard: HostGuard) -> None:
        self._client = client
        self._guard = guard

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        req = parse_input(inp, WebhookPostInput)
        cred = credential_of(inp, credential, ConnectionType.WEBHOOK)
        key = signing_key(cred.secret)
        now = datetime.now(UTC)
        timestamp = int(now.timestamp())
        body = json.dumps(
            {
                "type": req.event_type,
                "timestamp": now.isoformat().replace("+00:00", "Z"),
                "data": req.payload,
            },
            separators=(",", ":"),
        ).encode()
        msg_id = inp.idempotency_key
        request = SendRequest(
            "POST",
            str(req.url),
            headers={
                "Content-Type": "application/json",
                "webhook-id": msg_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signature(key, msg_id, timestamp, body),
            },
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            content=body,
            credential=cred,
        )
        answer = await send(self._client, self._guard, request)
        out = interpret(answer.response, answer.body, repeat=inp.repeat)
        return answered(out, answer.body, "webhook", object_id=msg_id)
