"""The adapters that undo an effect, ``github.close_issue`` and ``slack.delete_message``,
against the provider fakes, attempt by attempt as Temporal would retry.

What must hold: they are exactly once by nature (``natural``): a repeat leaves the state the
first call left, one closing per issue and one deletion per message however the attempts go;
a message not found is done only when an earlier attempt may have deleted it; the
providers' refusals map onto the taxonomy, and a rate limit's wait is honoured."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.exceptions import ApplicationError

from activities import (
    GithubAdapter,
    GithubCloseIssueAdapter,
    HostGuard,
    SlackAdapter,
    SlackDeleteMessageAdapter,
    http_client,
)
from schemas.capabilities import CapabilityCatalog, IdempotencyStrategy
from schemas.connections import ConnectionType, Credential
from schemas.run import AdapterInput
from starter.devstack.providers import FakeGithub, FakeSlack, Misbehaviour
from tests.activities.test_provider_adapters import _again, _details, _input

SLACK_TOKEN = "xoxb-natural"
GITHUB_TOKEN = "ghp_natural"


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = http_client()
    yield client
    await client.aclose()


def test_both_are_natural() -> None:
    catalog = CapabilityCatalog()
    for capability_id, kind in (
        ("github.close_issue", ConnectionType.GITHUB),
        ("slack.delete_message", ConnectionType.SLACK),
    ):
        spec = catalog.get(capability_id)
        assert spec is not None
        assert spec.idempotency == IdempotencyStrategy.NATURAL == "natural"
        assert spec.connection_types == (kind,) and spec.connection_required
        assert spec.effect_type == "API_CALL"


@pytest.mark.parametrize(
    ("capability_id", "adapter", "kind", "data", "bad"),
    [
        (
            "github.close_issue",
            GithubCloseIssueAdapter,
            ConnectionType.GITHUB,
            {"owner": "octo", "repo": "r", "number": 1},
            [{"number": 0}, {"number": "one"}, {"state_reason": "duplicate"}, {"repo": ".."}],
        ),
        (
            "slack.delete_message",
            SlackDeleteMessageAdapter,
            ConnectionType.SLACK,
            {"channel": "C1", "ts": "1.2"},
            [{"ts": "yesterday"}, {"channel": ""}, {"text": "x"}],
        ),
    ],
)
async def test_input_and_connection_are_checked_before_any_call(
    http: httpx.AsyncClient,
    capability_id: str,
    adapter: Any,
    kind: ConnectionType,
    data: dict[str, Any],
    bad: list[dict[str, Any]],
) -> None:
    call = adapter(http, HostGuard([]))
    inp = _input(capability_id, data, "127.0.0.1:9")  # nothing listens: nothing is called
    for wrong in bad:
        refused_input = inp.model_copy(update={"input": {**data, **wrong}})
        with pytest.raises(ApplicationError) as refused:
            await call(refused_input, Credential("c", kind, "x"))
        assert refused.value.type == "schema_validation_failed", wrong
    with pytest.raises(ApplicationError) as missing:
        await call(inp, None)
    assert missing.value.type == "connection_required"
    with pytest.raises(ApplicationError) as mismatch:
        await call(inp, Credential("c", ConnectionType.WEBHOOK, "x"))
    assert mismatch.value.type == "connection_type_mismatch"


# --- GitHub --------------------------------------------------------------------------------


def _gh(github: FakeGithub, token: str = GITHUB_TOKEN) -> Credential:
    return Credential("con_gh", ConnectionType.GITHUB, token, {"base_url": github.base_url})


async def _issue(github: FakeGithub, http: httpx.AsyncClient) -> tuple[str, str, int]:
    """A new issue in a new repository: (owner, repo, number)."""
    owner, repo = "octo", f"r{uuid.uuid4().hex[:8]}"
    data = {"owner": owner, "repo": repo, "title": "t"}
    inp = _input("github.create_issue", data, github.allow_entry)
    out = await GithubAdapter(http, HostGuard([]))(inp, _gh(github))
    return owner, repo, out.output["number"]


def _close(github: FakeGithub, owner: str, repo: str, number: int, **more: Any) -> AdapterInput:
    data = {"owner": owner, "repo": repo, "number": number, **more}
    return _input("github.close_issue", data, github.allow_entry)


async def test_github_close_issue_closes_it(github: FakeGithub, http: httpx.AsyncClient) -> None:
    owner, repo, number = await _issue(github, http)
    adapter = GithubCloseIssueAdapter(http, HostGuard([]))
    inp = _close(github, owner, repo, number, state_reason="not_planned")
    out = await adapter(inp, _gh(github))
    [issue] = github.issues_of(owner, repo)
    assert out.http_status == 200
    assert out.output == {"number": number, "html_url": issue["html_url"], "state": "closed"}
    assert out.reconciled is None  # nothing is looked for
    assert (issue["state"], issue["state_reason"]) == ("closed", "not_planned")
    assert github.closes_of(owner, repo, number) == 1
    [patch] = [r for r in github.calls(f"/{repo}/issues/{number}") if r.method == "PATCH"]
    assert patch.json() == {"state": "closed", "state_reason": "not_planned"}
    assert patch.headers["x-github-api-version"] == "2022-11-28"


@pytest.mark.parametrize("mode", [Misbehaviour.DROP, Misbehaviour.LATE])
async def test_github_close_repeated_after_a_lost_answer_closes_once(
    github: FakeGithub, http: httpx.AsyncClient, mode: Misbehaviour
) -> None:
    owner, repo, number = await _issue(github, http)
    adapter = GithubCloseIssueAdapter(http, HostGuard([]))
    inp = _close(github, owner, repo, number)
    github.fail_next(1, mode, late_seconds=3)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, _gh(github))
    assert not lost.value.non_retryable
    assert github.issues_of(owner, repo)[0]["state"] == "closed"  # closed, unanswered
    out = await adapter(_again(inp, 2), _gh(github))
    assert out.output["state"] == "closed"
    assert github.closes_of(owner, repo, number) == 1
    [issue] = github.issues_of(owner, repo)
    assert issue["state_reason"] == "completed"  # GitHub's default


async def test_github_close_of_a_closed_issue_is_success(
    github: FakeGithub, http: httpx.AsyncClient
) -> None:
    owner, repo, number = await _issue(github, http)
    adapter = GithubCloseIssueAdapter(http, HostGuard([]))
    first = await adapter(_close(github, owner, repo, number), _gh(github))
    # A new execution (a first attempt) finds it closed: the same state, no second closing,
    # and a reason GitHub ignores since the state does not change.
    again = await adapter(
        _close(github, owner, repo, number, state_reason="not_planned"), _gh(github)
    )
    assert again.output == first.output
    assert github.closes_of(owner, repo, number) == 1
    assert github.issues_of(owner, repo)[0]["state_reason"] == "completed"


@pytest.mark.parametrize(
    ("setup", "status", "code", "retryable"),
    [
        (lambda f, r, n: f.bad_tokens.add(GITHUB_TOKEN), 401, "provider_auth_failure", False),
        (lambda f, r, n: f.forbidden_tokens.add(GITHUB_TOKEN), 403, "provider_auth_failure", False),
        (lambda f, r, n: f.missing_repos.add(r), 404, "provider_not_found", False),
        (lambda f, r, n: None, 404, "provider_not_found", False),  # no such number
        (lambda f, r, n: f.delete_issue(*r.split("/"), n), 410, "provider_invalid_input", False),
        (lambda f, r, n: f.error_next.append(422), 422, "provider_invalid_input", False),
        (lambda f, r, n: f.error_next.append(502), 502, "provider_server_error", True),
        (lambda f, r, n: f.error_next.append(503), 503, "provider_server_error", True),
    ],
)
async def test_github_close_refusals(
    http: httpx.AsyncClient, setup: Any, status: int, code: str, retryable: bool
) -> None:
    with FakeGithub() as github:
        owner, repo, number = await _issue(github, http)
        setup(github, f"{owner}/{repo}", number)
        asked = number + 1 if status == 404 and not github.missing_repos else number
        adapter = GithubCloseIssueAdapter(http, HostGuard([]))
        with pytest.raises(ApplicationError) as err:
            await adapter(_close(github, owner, repo, asked), _gh(github))
        details = _details(err.value)
        assert (err.value.type, details["http_status"]) == (code, status)
        assert err.value.non_retryable is not retryable
        assert "message" in details["provider_response"]
        assert github.closes_of(owner, repo, number) == 0


async def test_github_close_deleted_issue_says_gone(http: httpx.AsyncClient) -> None:
    with FakeGithub() as github:
        owner, repo, number = await _issue(github, http)
        github.delete_issue(owner, repo, number)
        with pytest.raises(ApplicationError) as err:
            await GithubCloseIssueAdapter(http, HostGuard([]))(
                _close(github, owner, repo, number), _gh(github)
            )
        said = _details(err.value)["provider_response"]
        assert said["message"] == "This issue was deleted"
        assert said["documentation_url"].startswith("https://docs.github.com/")


async def test_github_close_honours_the_rate_limits_wait(http: httpx.AsyncClient) -> None:
    with FakeGithub() as github:
        owner, repo, number = await _issue(github, http)
        adapter = GithubCloseIssueAdapter(http, HostGuard([]))
        inp = _close(github, owner, repo, number)
        # The secondary limit: 403 with Retry-After.
        github.retry_after, github.secondary_limit_next = 7, 1
        with pytest.raises(ApplicationError) as secondary:
            await adapter(inp, _gh(github))
        assert (secondary.value.type, _details(secondary.value)["http_status"]) == (
            "provider_rate_limited",
            403,
        )
        assert secondary.value.next_retry_delay == timedelta(seconds=7)
        # The primary limit: 429 with x-ratelimit-remaining 0, waiting until its reset.
        github.retry_after, github.primary_limit_next = 60, 1
        with pytest.raises(ApplicationError) as primary:
            await adapter(_again(inp, 2), _gh(github))
        assert (primary.value.type, _details(primary.value)["http_status"]) == (
            "provider_rate_limited",
            429,
        )
        assert not primary.value.non_retryable
        delay = primary.value.next_retry_delay
        assert delay is not None and timedelta(seconds=55) < delay <= timedelta(seconds=60)
        assert github.closes_of(owner, repo, number) == 0
        out = await adapter(_again(inp, 3), _gh(github))
        assert out.output["state"] == "closed" and github.closes_of(owner, repo, number) == 1


# --- Slack ---------------------------------------------------------------------------------


def _sl(slack: FakeSlack, token: str = SLACK_TOKEN) -> Credential:
    return Credential("con_sl", ConnectionType.SLACK, token, {"base_url": slack.base_url})


def _channel() -> str:
    return "C" + uuid.uuid4().hex[:10].upper()


async def _message(slack: FakeSlack, http: httpx.AsyncClient) -> tuple[str, str]:
    """A message the bot posted in a new channel: (channel, ts)."""
    channel = _channel()
    inp = _input("slack.post_message", {"channel": channel, "text": "hi"}, slack.allow_entry)
    out = await SlackAdapter(http, HostGuard([]))(inp, _sl(slack))
    return channel, out.output["ts"]


def _delete(slack: FakeSlack, channel: str, ts: str, **extra: Any) -> AdapterInput:
    return _input(
        "slack.delete_message", {"channel": channel, "ts": ts}, slack.allow_entry, **extra
    )


async def test_slack_delete_message_deletes_it(slack: FakeSlack, http: httpx.AsyncClient) -> None:
    channel, ts = await _message(slack, http)
    adapter = SlackDeleteMessageAdapter(http, HostGuard([]))
    out = await adapter(_delete(slack, channel, ts), _sl(slack))
    assert out.http_status == 200
    assert out.output == {"channel": channel, "ts": ts, "already_deleted": False}
    assert out.reconciled is None
    assert slack.posted(channel) == []
    assert slack.deleted(channel) == [ts]
    [call] = [r for r in slack.calls("chat.delete") if r.json()["channel"] == channel]
    assert call.json() == {"channel": channel, "ts": ts}
    assert call.headers["authorization"] == f"Bearer {SLACK_TOKEN}"


@pytest.mark.parametrize("mode", [Misbehaviour.DROP, Misbehaviour.LATE])
async def test_slack_delete_repeated_after_a_lost_answer_is_done(
    slack: FakeSlack, http: httpx.AsyncClient, mode: Misbehaviour
) -> None:
    channel, ts = await _message(slack, http)
    adapter = SlackDeleteMessageAdapter(http, HostGuard([]))
    inp = _delete(slack, channel, ts)
    slack.fail_next(1, mode, late_seconds=3)
    with pytest.raises(ApplicationError) as lost:
        await adapter(inp, _sl(slack))
    assert not lost.value.non_retryable
    assert slack.deleted(channel) == [ts]  # deleted, unanswered
    out = await adapter(_again(inp, 2), _sl(slack))
    assert out.output == {"channel": channel, "ts": ts, "already_deleted": True}
    assert slack.deleted(channel) == [ts]  # once


async def test_slack_message_not_found_fails_a_first_attempt_only(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackDeleteMessageAdapter(http, HostGuard([]))
    channel = _channel()
    inp = _delete(slack, channel, "1700000000.000100")
    with pytest.raises(ApplicationError) as first:
        await adapter(inp, _sl(slack))
    assert (first.value.type, first.value.non_retryable) == ("provider_not_found", True)
    assert _details(first.value)["provider_response"] == {
        "ok": False,
        "error": "message_not_found",
    }
    # An attempt that may repeat an earlier one: a retry, or a resumed run's first.
    for repeat in (_again(inp, 2), inp.model_copy(update={"resumed": True})):
        out = await adapter(repeat, _sl(slack))
        assert out.output == {"channel": channel, "ts": inp.input["ts"], "already_deleted": True}
    assert slack.deleted(channel) == []


READ_ONLY = SLACK_TOKEN + "-read-only"
REVOKED = SLACK_TOKEN + "-revoked"


@pytest.mark.parametrize(
    ("setup", "token", "code", "retryable"),
    [
        (lambda f, c: f.missing_channels.add(c), SLACK_TOKEN, "provider_not_found", False),
        (lambda f, c: None, READ_ONLY, "provider_auth_failure", False),  # missing_scope
        (lambda f, c: None, REVOKED, "provider_auth_failure", False),
        (
            lambda f, c: f.error_next.append("compliance_exports_prevent_deletion"),
            SLACK_TOKEN,
            "provider_invalid_input",
            False,
        ),
        (
            lambda f, c: f.error_next.append("internal_error"),
            SLACK_TOKEN,
            "provider_server_error",
            True,
        ),
        (
            lambda f, c: setattr(f, "rate_limit_next", 1),
            SLACK_TOKEN,
            "provider_rate_limited",
            True,
        ),
    ],
)
async def test_slack_delete_refusals(
    slack: FakeSlack,
    http: httpx.AsyncClient,
    setup: Any,
    token: str,
    code: str,
    retryable: bool,
) -> None:
    slack.scopes[READ_ONLY] = {"channels:history"}
    slack.revoked.add(REVOKED)
    channel, ts = await _message(slack, http)
    setup(slack, channel)
    adapter = SlackDeleteMessageAdapter(http, HostGuard([]))
    with pytest.raises(ApplicationError) as err:
        await adapter(_delete(slack, channel, ts), _sl(slack, token))
    assert err.value.type == code
    assert err.value.non_retryable is not retryable
    said = _details(err.value)["provider_response"]
    assert said["ok"] is False and said["error"]
    if code == "provider_rate_limited":
        assert (_details(err.value)["http_status"], said["error"]) == (429, "ratelimited")
        assert err.value.next_retry_delay == timedelta(seconds=slack.retry_after)
    assert slack.deleted(channel) == []


async def test_slack_cannot_delete_someone_elses_message(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    channel = _channel()
    ts = slack.seed(channel, "a person's words")
    adapter = SlackDeleteMessageAdapter(http, HostGuard([]))
    for attempt in (1, 2):
        with pytest.raises(ApplicationError) as err:
            await adapter(_again(_delete(slack, channel, ts), attempt), _sl(slack))
        assert (err.value.type, err.value.non_retryable) == ("provider_invalid_input", True)
        assert _details(err.value)["provider_response"]["error"] == "cant_delete_message"
    assert [m["ts"] for m in slack.posted(channel)] == [ts]


def test_the_fakes_answer_like_the_providers_over_plain_http(
    github: FakeGithub, slack: FakeSlack
) -> None:
    auth = {"Authorization": f"Bearer {GITHUB_TOKEN}"}
    repo = f"r{uuid.uuid4().hex[:8]}"
    issues = f"{github.base_url}/repos/octo/{repo}/issues"
    made = httpx.post(issues, json={"title": "t"}, headers=auth).json()
    one = f"{issues}/{made['number']}"
    refused = httpx.patch(one, json={"state": "shut"}, headers=auth)
    assert refused.status_code == 422
    assert refused.json()["errors"] == [{"resource": "Issue", "code": "invalid", "field": "state"}]
    assert refused.json()["documentation_url"].endswith("#update-an-issue")
    for state in ("closed", "open", "closed"):
        assert httpx.patch(one, json={"state": state}, headers=auth).json()["state"] == state
    shown = httpx.get(one, headers=auth).json()
    assert (shown["state"], shown["state_reason"]) == ("closed", "completed")
    assert shown["closed_at"] is not None
    assert github.closes_of("octo", repo, made["number"]) == 2  # closed, reopened, closed
    assert httpx.get(f"{issues}/999", headers=auth).status_code == 404
    state = httpx.get(f"{github.base_url}/_fake/state").json()
    assert state["closes"][f"octo/{repo}#{made['number']}"] == 2

    # Slack's Web API takes form bodies too, and the token as a parameter.
    channel = _channel()
    ts = slack.seed(channel, "someone's")
    form = {"token": SLACK_TOKEN, "channel": channel, "ts": ts}
    answer = httpx.post(f"{slack.base_url}/api/chat.delete", data=form).json()
    assert answer == {"ok": False, "error": "cant_delete_message"}
    slack.scopes["xoxb-read-only"] = {"channels:history"}
    answer = httpx.post(
        f"{slack.base_url}/api/chat.delete", data={**form, "token": "xoxb-read-only"}
    ).json()
    assert answer["error"] == "missing_scope" and answer["needed"] == "chat:write"
    assert slack.deleted(channel) == []
