"""``slack.update_message`` against the Slack fake: ``chat.update`` replaces the bot's own
message (a repeat leaves the same message: natural), and Slack's refusals map to Moat's
failures (``message_not_found``, ``cant_update_message``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.exceptions import ApplicationError

from activities import HostGuard, SlackUpdateMessageAdapter, http_client
from schemas.capabilities import CapabilityCatalog, IdempotencyStrategy
from schemas.run import AdapterInput
from starter.devstack.providers import FakeSlack
from tests.activities.test_natural_adapters import _channel, _message, _sl
from tests.activities.test_provider_adapters import _again, _details, _input

BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Approved*"}}]


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = http_client()
    yield client
    await client.aclose()


def _update(slack: FakeSlack, channel: str, ts: str) -> AdapterInput:
    body = {"channel": channel, "ts": ts, "text": "Approved", "blocks": BLOCKS}
    return _input("slack.update_message", body, slack.allow_entry)


def test_it_is_natural() -> None:
    spec = CapabilityCatalog().get("slack.update_message")
    assert spec is not None and spec.idempotency == IdempotencyStrategy.NATURAL


async def test_update_replaces_text_and_blocks_once_or_twice_alike(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    channel, ts = await _message(slack, http)
    adapter = SlackUpdateMessageAdapter(http, HostGuard([]))
    inp = _update(slack, channel, ts)
    first = await adapter(inp, _sl(slack))
    again = await adapter(_again(inp, 2), _sl(slack))
    assert first.output == again.output == {"channel": channel, "ts": ts}
    [message] = slack.posted(channel)
    assert (message["text"], message["blocks"]) == ("Approved", BLOCKS)
    assert slack.updated(channel) == [ts, ts]


async def test_update_refusals(slack: FakeSlack, http: httpx.AsyncClient) -> None:
    adapter = SlackUpdateMessageAdapter(http, HostGuard([]))
    channel = _channel()
    with pytest.raises(ApplicationError) as missing:
        await adapter(_update(slack, channel, "1.000001"), _sl(slack))
    assert missing.value.type == "provider_not_found" and missing.value.non_retryable
    someone = slack.seed(channel, "a person's")
    with pytest.raises(ApplicationError) as theirs:
        await adapter(_update(slack, channel, someone), _sl(slack))
    assert theirs.value.type == "provider_invalid_input"
    assert _details(theirs.value)["provider_response"]["error"] == "cant_update_message"
    assert slack.updated(channel) == []
