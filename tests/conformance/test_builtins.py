"""Moat's own adapters pass the conformance kit (``moat.testing``), each against its
provider's fake: the kit adds its checks to this module (``TestMoatConformance``), once per
capability below. A check that does not apply to a capability's strategy skips, naming why.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from moat.testing import Conformance, ConnectionSpec
from moat.testing.providers import (
    FakeIdempotentApi,
    GithubConformanceFake,
    IdempotentApiConformanceFake,
    SlackConformanceFake,
    WebhookConformanceFake,
)
from starter.devstack.providers import (
    FakeGithub,
    FakeNotion,
    FakeResend,
    FakeSlack,
    FakeWebhookReceiver,
)
from starter.devstack.providers.mail import FakeMail
from tests.support.mail import ResendConformanceFake, SmtpConformanceFake
from tests.support.notion import NotionConformanceFake


def _unique(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


@pytest.fixture(scope="module")
def idempotent_api() -> Iterator[FakeIdempotentApi]:
    with FakeIdempotentApi() as fake:
        yield fake


@pytest.fixture(scope="module")
def receiver() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as fake:
        yield fake


def _http(api: FakeIdempotentApi) -> Conformance:
    fake = IdempotentApiConformanceFake(api)
    return Conformance(
        capability="http.request",
        input={"method": "POST", "url": f"{api.base_url}/orders", "json": {"sku": "kit"}},
        fake=fake,
        connection=ConnectionSpec("http_bearer", _unique("sk-kit-"), {"base_url": api.base_url}),
        refuse=fake.refuse,
    )


def _webhook(receiver: FakeWebhookReceiver) -> Conformance:
    fake = WebhookConformanceFake(receiver)
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    return Conformance(
        capability="webhook.post",
        input={"url": f"{receiver.base_url}/in", "event_type": "kit.ran", "payload": {"n": 1}},
        fake=fake,
        connection=ConnectionSpec("webhook", secret, {"base_url": receiver.base_url}),
        refuse=fake.refuse,
    )


def _slack(slack: FakeSlack) -> Conformance:
    fake = SlackConformanceFake(slack)
    return Conformance(
        capability="slack.post_message",
        input={"channel": "C" + uuid.uuid4().hex[:10].upper(), "text": "kit"},
        fake=fake,
        connection=ConnectionSpec("slack", _unique("xoxb-"), {"base_url": f"{slack.base_url}/api"}),
        refuse=fake.refuse,
    )


def _slack_delete(slack: FakeSlack) -> Conformance:
    token = _unique("xoxb-")
    channel = "C" + uuid.uuid4().hex[:10].upper()

    def posted() -> dict[str, Any]:
        """A fresh message of the bot's for each check to delete."""
        answer = httpx.post(
            f"{slack.base_url}/api/chat.postMessage",
            json={"channel": channel, "text": "to delete"},
            headers={"Authorization": f"Bearer {token}"},
        )
        return {"channel": channel, "ts": answer.json()["ts"]}

    fake = SlackConformanceFake(slack, "chat.delete")
    return Conformance(
        capability="slack.delete_message",
        input=posted,
        fake=fake,
        connection=ConnectionSpec("slack", token, {"base_url": f"{slack.base_url}/api"}),
        refuse=fake.refuse,
    )


def _github(github: FakeGithub) -> Conformance:
    fake = GithubConformanceFake(github)
    return Conformance(
        capability="github.create_issue",
        input={"owner": "moat", "repo": f"r{uuid.uuid4().hex[:8]}", "title": "kit"},
        fake=fake,
        connection=ConnectionSpec("github", _unique("ghp_"), {"base_url": github.base_url}),
        refuse=fake.refuse,
    )


def _github_close(github: FakeGithub) -> Conformance:
    token, repo = _unique("ghp_"), f"r{uuid.uuid4().hex[:8]}"

    def opened() -> dict[str, Any]:
        """A fresh open issue for each check to close."""
        answer = httpx.post(
            f"{github.base_url}/repos/moat/{repo}/issues",
            json={"title": "to close"},
            headers={"Authorization": f"Bearer {token}"},
        )
        return {"owner": "moat", "repo": repo, "number": answer.json()["number"]}

    fake = GithubConformanceFake(github, closing=True)
    return Conformance(
        capability="github.close_issue",
        input=opened,
        fake=fake,
        connection=ConnectionSpec("github", token, {"base_url": github.base_url}),
        refuse=fake.refuse,
    )


@pytest.fixture(scope="module")
def resend() -> Iterator[FakeResend]:
    with FakeResend() as fake:
        yield fake


EMAIL = {"to": ["someone@example.com"], "subject": "kit", "text": "One message per key."}


def _smtp(mail: FakeMail) -> Conformance:
    """SMTP with the sent mailbox read back over IMAP: a lost answer is reconciled."""
    fake = SmtpConformanceFake(mail)
    kind, secret, config = fake.connection()
    return Conformance(
        capability="email.send",
        input=EMAIL,
        fake=fake,
        connection=ConnectionSpec(kind, secret, config),
        refuse=lambda count: mail.refuse_next(count, 451),
    )


def _resend(resend: FakeResend) -> Conformance:
    fake = ResendConformanceFake(resend, api_key=_unique("re_"))
    kind, secret, config = fake.connection()
    return Conformance(
        capability="email.send",
        input=EMAIL,
        fake=fake,
        connection=ConnectionSpec(kind, secret, config),
    )


def _notion(notion: FakeNotion) -> Conformance:
    fake = NotionConformanceFake(notion)

    def refuse(count: int) -> None:
        with notion.lock:
            notion.error_next[:] = [500] * count

    return Conformance(
        capability="notion.create_page",
        input=fake.input("kit"),
        fake=fake,
        connection=ConnectionSpec("notion", _unique("ntn_"), fake.connection_config()),
        refuse=refuse,
    )


CASES: dict[str, Callable[[pytest.FixtureRequest], Conformance]] = {
    "http.request": lambda r: _http(r.getfixturevalue("idempotent_api")),
    "webhook.post": lambda r: _webhook(r.getfixturevalue("receiver")),
    "slack.post_message": lambda r: _slack(r.getfixturevalue("slack")),
    "slack.delete_message": lambda r: _slack_delete(r.getfixturevalue("slack")),
    "github.create_issue": lambda r: _github(r.getfixturevalue("github")),
    "github.close_issue": lambda r: _github_close(r.getfixturevalue("github")),
    "email.send/smtp": lambda r: _smtp(r.getfixturevalue("mail")),
    "email.send/resend": lambda r: _resend(r.getfixturevalue("resend")),
    "notion.create_page": lambda r: _notion(r.getfixturevalue("notion")),
}


@pytest.fixture(params=list(CASES))
def moat_conformance(request: pytest.FixtureRequest) -> Conformance:
    return CASES[request.param](request)
