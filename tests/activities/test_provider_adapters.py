"""The webhook, Slack and GitHub adapters against the provider fakes, called directly with a
``Credential`` as the activity hands it over, attempt by attempt as Temporal would retry.

What must hold: one effect per key however the attempts go (an answer dropped or late after
the effect, a reset run starting over), the provider's refusals mapped onto the taxonomy,
and ``outcome_unknown`` rather than a blind retry when the effect cannot be looked for."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import standardwebhooks
from temporalio.exceptions import ApplicationError

from activities import (
    GithubAdapter,
    GithubRateLimitAdapter,
    HostGuard,
    SlackAdapter,
    SlackAuthTestAdapter,
    WebhookAdapter,
    http_client,
)
from activities.adapters.github import mark
from schemas.capabilities import CapabilityCatalog, RetrySettings
from schemas.connections import ConnectionType, Credential
from schemas.ids import uuid7
from schemas.records import OUTCOME_UNKNOWN
from schemas.run import AdapterInput
from starter.devstack.providers import FakeGithub, FakeSlack, FakeWebhookReceiver, Misbehaviour

TOKEN = "xoxb-test-token"
WHSEC = "whsec_" + base64.b64encode(os.urandom(24)).decode()


@pytest.fixture(scope="module")
def receiver() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as fake:
        yield fake


@pytest.fixture
async def http() -> Any:
    client = http_client()
    yield client
    await client.aclose()


def _input(capability_id: str, data: dict[str, Any], allow: str, **extra: Any) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    spec = spec.model_copy(
        update={
            "timeout_seconds": 1.0,
            "retry": RetrySettings(max_retries=3, base_delay_seconds=0.01),
        }
    )
    return AdapterInput(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        capability=spec,
        input=data,
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow],
        **extra,
    )


def _again(inp: AdapterInput, attempt: int, **extra: Any) -> AdapterInput:
    return inp.model_copy(update={"attempt": attempt, **extra})


def _cred(kind: ConnectionType, secret: str, base_url: str) -> Credential:
    return Credential("con_test", kind, secret, {"base_url": base_url})


def _channel() -> str:
    return "C" + uuid.uuid4().hex[:10].upper()


def _details(err: ApplicationError) -> dict[str, Any]:
    assert err.details and isinstance(err.details[0], dict)
    return err.details[0]


# --- Slack ---------------------------------------------------------------------------------


async def test_slack_posts_once_with_its_mark(slack: FakeSlack, http: httpx.AsyncClient) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    channel = _channel()
    inp = _input("slack.post_message", {"channel": channel, "text": "hi"}, slack.allow_entry)
    out = await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    [message] = slack.posted(channel)
    assert out.output == {"channel": channel, "ts": message["ts"], "reconciled": False}
    assert out.reconciled is None  # a first attempt looks for nothing
    assert message["metadata"] == {
        "event_type": "moat_execution",
        "event_payload": {"key": inp.idempotency_key},
    }
    assert slack.calls("conversations.history") == []


@pytest.mark.parametrize("mode", [Misbehaviour.DROP, Misbehaviour.LATE])
async def test_slack_retry_after_a_lost_answer_finds_the_message(
    slack: FakeSlack, http: httpx.AsyncClient, mode: Misbehaviour
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.SLACK, TOKEN, slack.base_url)
    channel = _channel()
    inp = _input("slack.post_message", {"channel": channel, "text": "once"}, slack.allow_entry)
    slack.fail_next(1, mode, late_seconds=3)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, cred)
    assert not lost.value.non_retryable
    assert lost.value.type == ("network_error" if mode == Misbehaviour.DROP else "timeout")
    [message] = slack.posted(channel)  # the effect happened though no answer came
    posts = len(slack.calls("chat.postMessage"))
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True
    assert out.output == {"channel": channel, "ts": message["ts"], "reconciled": True}
    assert len(slack.posted(channel)) == 1
    assert len(slack.calls("chat.postMessage")) == posts  # no second post


async def test_slack_resumed_run_posts_when_nothing_was_posted(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    channel = _channel()
    inp = _input(
        "slack.post_message", {"channel": channel, "text": "x"}, slack.allow_entry, resumed=True
    )
    out = await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    assert out.reconciled is False
    assert len(slack.posted(channel)) == 1
    [looked] = [r for r in slack.calls("conversations.history") if r.query["channel"] == channel]
    assert looked.query["include_all_metadata"] == "true"
    assert float(looked.query["oldest"]) > 0


async def test_slack_thread_reply_is_found_in_the_thread(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.SLACK, TOKEN, slack.base_url)
    channel = _channel()
    parent = await adapter(
        _input("slack.post_message", {"channel": channel, "text": "p"}, slack.allow_entry), cred
    )
    reply = {"channel": channel, "text": "r", "thread_ts": parent.output["ts"]}
    inp = _input("slack.post_message", reply, slack.allow_entry)
    slack.fail_next(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True
    assert len(slack.posted(channel)) == 2  # parent and one reply


async def test_slack_history_refused_is_outcome_unknown(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    token = "xoxb-write-only"
    slack.scopes[token] = {"chat:write"}
    channel = _channel()
    inp = _input("slack.post_message", {"channel": channel, "text": "?"}, slack.allow_entry)
    with pytest.raises(ApplicationError) as err:
        await adapter(_again(inp, 2), _cred(ConnectionType.SLACK, token, slack.base_url))
    assert err.value.type == OUTCOME_UNKNOWN
    assert err.value.non_retryable
    details = _details(err.value)
    assert details["taxonomy"] == "timeout"
    assert details["provider_response"]["error"] == "missing_scope"
    assert details["provider_response"]["needed"] == "channels:history"
    assert slack.posted(channel) == []  # not posted blindly


async def test_slack_last_attempt_without_answer_is_outcome_unknown(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    channel = _channel()
    inp = _input("slack.post_message", {"channel": channel, "text": "l"}, slack.allow_entry)
    slack.fail_next(1)
    with pytest.raises(ApplicationError) as err:
        await adapter(_again(inp, 4), _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    assert err.value.type == OUTCOME_UNKNOWN and err.value.non_retryable


@pytest.mark.parametrize(
    ("setup", "code", "retryable"),
    [
        (lambda f, c: f.missing_channels.add(c), "provider_not_found", False),
        (lambda f, c: f.not_member.add(c), "provider_invalid_input", False),
        (lambda f, c: f.revoked.add(TOKEN + "-revoked"), "provider_auth_failure", False),
        (lambda f, c: f.error_next.append("internal_error"), "provider_server_error", True),
        (lambda f, c: setattr(f, "rate_limit_next", 1), "provider_rate_limited", True),
    ],
)
async def test_slack_refusals(
    slack: FakeSlack, http: httpx.AsyncClient, setup: Any, code: str, retryable: bool
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    channel = _channel()
    setup(slack, channel)
    token = TOKEN + "-revoked" if code == "provider_auth_failure" else TOKEN
    inp = _input("slack.post_message", {"channel": channel, "text": "no"}, slack.allow_entry)
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, _cred(ConnectionType.SLACK, token, slack.base_url))
    assert err.value.type == code
    assert err.value.non_retryable is not retryable
    if code == "provider_rate_limited":
        assert err.value.next_retry_delay is not None
        assert err.value.next_retry_delay.total_seconds() == slack.retry_after
    else:
        assert "error" in _details(err.value)["provider_response"]
    assert slack.posted(channel) == []


async def test_slack_too_long_text_is_refused_by_slack(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "b"}}]
    inp = _input(
        "slack.post_message",
        {"channel": "C1", "text": "x" * 40000, "blocks": blocks},
        slack.allow_entry,
    )
    inp = inp.model_copy(update={"input": {**inp.input, "text": "x" * 40001}})
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    # The adapter validates its input again: the gateway's check may have been skipped.
    assert err.value.type == "schema_validation_failed"


async def test_base_url_passes_the_host_guard(slack: FakeSlack, http: httpx.AsyncClient) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    inp = _input("slack.post_message", {"channel": "C1", "text": "x"}, "example.org")
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    assert err.value.type == "host_not_allowed"


async def test_wrong_or_missing_connection(slack: FakeSlack, http: httpx.AsyncClient) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    inp = _input("slack.post_message", {"channel": "C1", "text": "x"}, slack.allow_entry)
    with pytest.raises(ApplicationError) as missing:
        await adapter(inp, None)
    assert missing.value.type == "connection_required"
    with pytest.raises(ApplicationError) as wrong:
        await adapter(inp, _cred(ConnectionType.GITHUB, "ghp_x", slack.base_url))
    assert wrong.value.type == "connection_type_mismatch"


async def test_slack_auth_test_reads_who_the_token_is(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAuthTestAdapter(http, HostGuard([]))
    inp = _input("slack.auth_test", {}, slack.allow_entry)
    before = len(slack.calls("auth.test"))
    out = await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    assert out.http_status == 200
    assert out.output == {
        "team": "Fake Workspace",
        "team_id": "T0FAKETEAM",
        "user": "moat-bot",
        "user_id": "U0FAKEBOT",
        "bot_id": "B0FAKEBOT",
    }
    [call] = slack.calls("auth.test")[before:]
    assert call.method == "POST" and call.headers["authorization"] == f"Bearer {TOKEN}"

    revoked = TOKEN + "-auth-test-revoked"
    slack.revoked.add(revoked)
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, _cred(ConnectionType.SLACK, revoked, slack.base_url))
    assert (err.value.type, err.value.non_retryable) == ("provider_auth_failure", True)
    assert _details(err.value)["provider_response"] == {"ok": False, "error": "token_revoked"}

    slack.rate_limit_next = 1
    with pytest.raises(ApplicationError) as limited:
        await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url))
    assert limited.value.type == "provider_rate_limited" and not limited.value.non_retryable
    assert limited.value.next_retry_delay is not None

    with pytest.raises(ApplicationError) as wrong:
        await adapter(inp, _cred(ConnectionType.GITHUB, "ghp_x", slack.base_url))
    assert wrong.value.type == "connection_type_mismatch"
    with pytest.raises(ApplicationError) as extra:
        await adapter(inp.model_copy(update={"input": {"channel": "C1"}}), None)
    assert extra.value.type == "schema_validation_failed"


# --- GitHub --------------------------------------------------------------------------------


async def test_github_rate_limit_reads_the_core_limit(
    github: FakeGithub, http: httpx.AsyncClient
) -> None:
    adapter = GithubRateLimitAdapter(http, HostGuard([]))
    token = f"ghp_{uuid.uuid4().hex}"
    inp = _input("github.rate_limit", {}, github.allow_entry)
    out = await adapter(inp, _cred(ConnectionType.GITHUB, token, github.base_url))
    core = out.output["core"]
    assert (core["limit"], core["used"], core["remaining"]) == (5000, 0, 5000)
    assert core["reset"] > 0
    # Reading the limit is not counted against it; an issue call is.
    owner, repo = _repo()
    issue = {"owner": owner, "repo": repo, "title": "t"}
    await GithubAdapter(http, HostGuard([]))(
        _input("github.create_issue", issue, github.allow_entry),
        _cred(ConnectionType.GITHUB, token, github.base_url),
    )
    again = await adapter(inp, _cred(ConnectionType.GITHUB, token, github.base_url))
    assert (again.output["core"]["used"], again.output["core"]["remaining"]) == (1, 4999)
    [call, *_] = github.calls("/rate_limit")
    assert call.method == "GET" and call.headers["x-github-api-version"] == "2022-11-28"

    github.bad_tokens.add(bad := f"ghp_{uuid.uuid4().hex}")
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, _cred(ConnectionType.GITHUB, bad, github.base_url))
    assert (err.value.type, err.value.non_retryable) == ("provider_auth_failure", True)
    assert _details(err.value)["http_status"] == 401
    with pytest.raises(ApplicationError) as wrong:
        await adapter(inp, _cred(ConnectionType.SLACK, TOKEN, github.base_url))
    assert wrong.value.type == "connection_type_mismatch"


def _repo() -> tuple[str, str]:
    return "octo", f"r{uuid.uuid4().hex[:8]}"


async def test_github_creates_once_and_reconciles(
    github: FakeGithub, http: httpx.AsyncClient
) -> None:
    adapter = GithubAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.GITHUB, "ghp_test", github.base_url)
    owner, repo = _repo()
    data = {"owner": owner, "repo": repo, "title": "Bug", "body": "It broke.", "labels": ["bug"]}
    inp = _input("github.create_issue", data, github.allow_entry)
    github.fail_next(1)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, cred)
    assert not lost.value.non_retryable
    [issue] = github.issues_of(owner, repo)
    assert issue["body"] == f"It broke.\n\n{mark(inp.idempotency_key)}"
    out = await adapter(_again(inp, 2), cred)
    assert out.reconciled is True
    assert out.output["number"] == issue["number"]
    assert out.output["html_url"] == issue["html_url"]
    assert len(github.issues_of(owner, repo)) == 1
    [listed] = [r for r in github.calls(f"/{repo}/issues") if r.method == "GET"]
    assert listed.query["state"] == "all"
    assert listed.query["sort"] == "created"
    assert listed.query["direction"] == "desc"
    assert listed.query["since"].endswith("Z")


async def test_github_fresh_issue_among_others(github: FakeGithub, http: httpx.AsyncClient) -> None:
    adapter = GithubAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.GITHUB, "ghp_test", github.base_url)
    owner, repo = _repo()
    for n in range(3):
        other = _input(
            "github.create_issue",
            {"owner": owner, "repo": repo, "title": f"o{n}"},
            github.allow_entry,
        )
        await adapter(other, cred)
    inp = _input(
        "github.create_issue",
        {"owner": owner, "repo": repo, "title": "mine"},
        github.allow_entry,
        resumed=True,
    )
    out = await adapter(inp, cred)
    assert out.reconciled is False
    assert out.output["number"] == 4
    assert (await adapter(_again(inp, 2), cred)).output["number"] == 4
    assert len(github.issues_of(owner, repo)) == 4


@pytest.mark.parametrize(
    ("setup", "status", "code", "retryable"),
    [
        (lambda f, r: f.bad_tokens.add("ghp_test"), 401, "provider_auth_failure", False),
        (lambda f, r: f.forbidden_tokens.add("ghp_test"), 403, "provider_auth_failure", False),
        (lambda f, r: f.missing_repos.add(r), 404, "provider_not_found", False),
        (lambda f, r: f.issues_disabled.add(r), 410, "provider_invalid_input", False),
        (lambda f, r: setattr(f, "users", {"octocat"}), 422, "provider_invalid_input", False),
        (lambda f, r: setattr(f, "secondary_limit_next", 1), 403, "provider_rate_limited", True),
    ],
)
async def test_github_refusals(
    http: httpx.AsyncClient, setup: Any, status: int, code: str, retryable: bool
) -> None:
    with FakeGithub() as github:
        adapter = GithubAdapter(http, HostGuard([]))
        owner, repo = _repo()
        setup(github, f"{owner}/{repo}")
        data = {"owner": owner, "repo": repo, "title": "t", "assignees": ["nobody"]}
        inp = _input("github.create_issue", data, github.allow_entry)
        with pytest.raises(ApplicationError) as err:
            await adapter(inp, _cred(ConnectionType.GITHUB, "ghp_test", github.base_url))
        details = _details(err.value)
        assert (err.value.type, details["http_status"]) == (code, status)
        assert err.value.non_retryable is not retryable
        said = details["provider_response"]
        assert said["documentation_url"].startswith("https://docs.github.com/")
        if status == 422:
            assert said["errors"][0]["field"] == "assignees"
        if retryable:
            assert err.value.next_retry_delay is not None
        assert github.issues_of(owner, repo) == []


async def test_github_list_refused_is_outcome_unknown(
    github: FakeGithub, http: httpx.AsyncClient
) -> None:
    adapter = GithubAdapter(http, HostGuard([]))
    github.write_only_tokens.add("ghp_write_only")
    owner, repo = _repo()
    inp = _input(
        "github.create_issue", {"owner": owner, "repo": repo, "title": "t"}, github.allow_entry
    )
    with pytest.raises(ApplicationError) as err:
        await adapter(
            _again(inp, 2), _cred(ConnectionType.GITHUB, "ghp_write_only", github.base_url)
        )
    assert err.value.type == OUTCOME_UNKNOWN
    assert _details(err.value)["http_status"] == 403
    assert github.issues_of(owner, repo) == []


# --- Standard Webhooks ----------------------------------------------------------------------


async def test_webhook_signed_and_deduplicated_across_retries(
    receiver: FakeWebhookReceiver, http: httpx.AsyncClient
) -> None:
    adapter = WebhookAdapter(http, HostGuard([]))
    cred = Credential("con_w", ConnectionType.WEBHOOK, WHSEC, {"base_url": receiver.base_url})
    data = {"url": f"{receiver.base_url}/hooks", "event_type": "order.paid", "payload": {"n": 1}}
    inp = _input("webhook.post", data, receiver.allow_entry)
    receiver.fail_next(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    out = await adapter(_again(inp, 2), cred)
    assert out.http_status == 200
    attempts = [d for d in receiver.deliveries if d.id == inp.idempotency_key]
    assert len(attempts) == 2
    assert [d.id for d in receiver.events.values()].count(inp.idempotency_key) == 1
    verifier = standardwebhooks.Webhook(WHSEC)
    for delivery in attempts:
        payload = verifier.verify(delivery.body, delivery.headers)
        assert payload["type"] == "order.paid"
        assert payload["data"] == {"n": 1}


async def test_webhook_refuses_a_secret_that_is_not_whsec(
    receiver: FakeWebhookReceiver, http: httpx.AsyncClient
) -> None:
    adapter = WebhookAdapter(http, HostGuard([]))
    data = {"url": f"{receiver.base_url}/h", "event_type": "e", "payload": {}}
    inp = _input("webhook.post", data, receiver.allow_entry)
    with pytest.raises(ApplicationError) as err:
        await adapter(inp, Credential("con_w", ConnectionType.WEBHOOK, "whsec_***not base64***"))
    assert err.value.type == "connection_invalid"
    assert "***" not in err.value.message


def test_fakes_answer_like_the_providers_over_plain_http(slack: FakeSlack) -> None:
    # Slack's Web API takes form bodies too, and the token as a parameter.
    r = httpx.post(
        f"{slack.base_url}/api/conversations.history",
        data={"token": "nope", "channel": "C1"},
    )
    assert r.status_code == 200 and json.loads(r.content) == {"ok": False, "error": "invalid_auth"}
