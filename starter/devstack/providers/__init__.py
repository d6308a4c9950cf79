"""Local fakes of the providers Moat's adapters call (Slack's Web API, GitHub's issues API,
Notion's pages API, a Standard Webhooks receiver), written from the providers' public API
references. Tests start them, and so does ``moat up --fake-providers`` for an offline
walk-through."""

from starter.devstack.providers.github import FakeGithub
from starter.devstack.providers.notion import FakeNotion
from starter.devstack.providers.resend import FakeResend
from starter.devstack.providers.server import FakeServer, Misbehaviour, Reply, Request
from starter.devstack.providers.slack import FakeSlack
from starter.devstack.providers.webhook import Delivery, FakeWebhookReceiver

__all__ = [
    "Delivery",
    "FakeGithub",
    "FakeNotion",
    "FakeResend",
    "FakeServer",
    "FakeSlack",
    "FakeWebhookReceiver",
    "Misbehaviour",
    "Reply",
    "Request",
]
