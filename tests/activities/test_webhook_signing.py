"""Moat's own Standard Webhooks signer, checked by the reference library; the retry
schedule's waits."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from activities.webhooks import JITTER, retry_delay, sign


def secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def test_signature_verifies_with_the_reference_library() -> None:
    key, other = secret(), secret()
    body = b'{"data":{"id":"r1"},"timestamp":"2026-11-26T00:00:00+00:00","type":"x"}'
    stamp = int(datetime.now(UTC).timestamp())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": " ".join(
            [sign(other, "msg_1", stamp, body), sign(key, "msg_1", stamp, body)]
        ),
    }
    assert Webhook(key).verify(body, headers) == {
        "data": {"id": "r1"},
        "timestamp": "2026-11-26T00:00:00+00:00",
        "type": "x",
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(key).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(key).verify(body, {**headers, "webhook-id": "msg_2"})


def test_retry_schedule_doubles_with_jitter_and_honours_retry_after() -> None:
    for failures, expected in ((1, 2.0), (2, 4.0), (3, 8.0)):
        for _ in range(20):
            delay = retry_delay(2.0, failures, None)
            assert expected * (1 - JITTER) <= delay <= expected * (1 + JITTER)
    assert retry_delay(2.0, 1, timedelta(seconds=30)) == 30.0
    assert retry_delay(3600.0, 1, timedelta(seconds=1)) >= 3600 * (1 - JITTER)
