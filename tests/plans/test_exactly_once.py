"""A plan's steps happen once each, whatever befalls the plan: a provider that performs a
step's effect and loses its answer, the plan's request repeated, ``temporal workflow
reset`` of the plan, and a resume after a failure repeat no completed step. Real gateway,
worker, Temporal and Postgres; the providers are the Slack, GitHub and webhook fakes."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, RetrySettings
from schemas.names import REPLAYED_HEADER
from starter.devstack.providers import FakeGithub, FakeSlack, FakeWebhookReceiver, Misbehaviour
from tests.plans.support import events_of, plan_action, post_plan, reset_plan
from tests.support.stack import Stack, StackFactory


def _fast(capability_id: str) -> Any:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    return spec.model_copy(
        update={
            "timeout_seconds": 2.0,
            "retry": RetrySettings(max_retries=3, base_delay_seconds=0.05),
        }
    )


FAST = ("slack.post_message", "github.create_issue", "webhook.post")
CATALOG = CapabilityCatalog(
    (*(s for s in BUILTIN_CAPABILITIES if s.id not in FAST), *(_fast(c) for c in FAST))
)


@pytest.fixture(scope="module")
def receiver() -> Iterator[FakeWebhookReceiver]:
    with FakeWebhookReceiver() as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory, slack: FakeSlack, github: FakeGithub, receiver: FakeWebhookReceiver
) -> AsyncIterator[Stack]:
    allow = [slack.allow_entry, github.allow_entry, receiver.allow_entry]
    async with make_stack(catalog=CATALOG, http_allow_hosts=allow) as s:
        yield s


async def _connections(
    stack: Stack, slack: FakeSlack, github: FakeGithub, receiver: FakeWebhookReceiver
) -> dict[str, str]:
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    return {
        "slack": await stack.add_connection("slack", "xoxb-p", config={"base_url": slack.base_url}),
        "github": await stack.add_connection(
            "github", "ghp_p", config={"base_url": github.base_url}
        ),
        "webhook": await stack.add_connection(
            "webhook", secret, config={"base_url": receiver.base_url}
        ),
    }


def three_steps(con: dict[str, str], repo: str, channel: str, path: str) -> dict[str, Any]:
    return {
        "steps": [
            {
                "id": "issue",
                "capability_id": "github.create_issue",
                "connection_id": con["github"],
                "input": {"owner": "acme", "repo": repo, "title": "Checkout fails"},
            },
            {
                "id": "tell",
                "capability_id": "slack.post_message",
                "connection_id": con["slack"],
                "input": {"channel": channel, "text": "Filed ${steps.issue.output.html_url}"},
            },
            {
                "id": "hook",
                "capability_id": "webhook.post",
                "connection_id": con["webhook"],
                "input": {
                    "url": path,
                    "event_type": "issue.filed",
                    "payload": {"number": "${steps.issue.output.number}"},
                },
            },
        ]
    }


def _counts(
    github: FakeGithub,
    slack: FakeSlack,
    receiver: FakeWebhookReceiver,
    repo: str,
    channel: str,
    path: str,
) -> tuple[int, int, int]:
    hooks = {d.id for d in receiver.events.values() if d.path == path.rsplit("/", 1)[-1] or True}
    delivered = [d for d in receiver.events.values() if receiver.base_url + d.path == path]
    del hooks
    return len(github.issues_of("acme", repo)), len(slack.posted(channel)), len(delivered)


async def test_a_lost_answer_mid_plan_leaves_one_effect_per_step(
    stack: Stack, slack: FakeSlack, github: FakeGithub, receiver: FakeWebhookReceiver
) -> None:
    con = await _connections(stack, slack, github, receiver)
    run = uuid.uuid4().hex[:10]
    repo, channel, path = f"r{run}", f"C{run.upper()}", f"{receiver.base_url}/in/{run}"
    plan = three_steps(con, repo, channel, path)
    slack.fail_next(1, Misbehaviour.DROP)  # the message is posted, its answer lost
    key = f"plan-{run}"
    answer = await post_plan(stack, plan, key=key)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [s["status"] for s in body["steps"]] == ["executed"] * 3
    assert _counts(github, slack, receiver, repo, channel, path) == (1, 1, 1)
    [issue] = github.issues_of("acme", repo)
    [message] = slack.posted(channel)
    assert message["text"] == f"Filed {issue['html_url']}"
    tell = body["steps"][1]["output"]
    assert tell["ts"] == message["ts"] and tell["reconciled"] is True

    # The request repeated: the stored plan, nothing more.
    again = await post_plan(stack, plan, key=key)
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.json()["steps"] == body["steps"]
    # The plan reset, from its first and its last workflow task: nothing repeated.
    for kind in ("FirstWorkflowTask", "LastWorkflowTask"):
        await reset_plan(stack, body["workflow_id"], kind)
        assert _counts(github, slack, receiver, repo, channel, path) == (1, 1, 1)
    shown = await stack.http.get(
        f"{stack.url}/v1/plans/{body['plan_id']}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert [s["receipt_id"] for s in shown.json()["steps"]] == [
        s["receipt_id"] for s in body["steps"]
    ]
    types = [e.event_type.value for e in await events_of(stack, body["plan_id"])]
    assert types[:3] == ["SIGNAL_RECEIVED", "SIGNAL_PROCESSING_STARTED", "RUN_STARTED"]
    assert types.count("RUN_CHECKPOINT_CREATED") == 3
    assert "SIGNAL_PROCESSED" in types


async def test_resume_after_a_failure_repeats_nothing_that_completed(
    stack: Stack, slack: FakeSlack, github: FakeGithub, receiver: FakeWebhookReceiver
) -> None:
    con = await _connections(stack, slack, github, receiver)
    run = uuid.uuid4().hex[:10]
    repo, channel, path = f"r{run}", f"C{run.upper()}", f"{receiver.base_url}/in/{run}"
    plan = three_steps(con, repo, channel, path)
    receiver.status_next.extend([400])  # the webhook refuses once, for good
    answer = await post_plan(stack, plan, key=f"plan-{run}")
    body = answer.json()
    assert body["status"] == "failed", answer.text
    assert [s["status"] for s in body["steps"]] == ["executed", "executed", "failed"]
    assert body["error"]["details"]["step"] == "hook"

    refused = await plan_action(stack, body["plan_id"], "resume", {"note": "no statement"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "effect_statement_required"

    resumed = await plan_action(
        stack,
        body["plan_id"],
        "resume",
        {"effect_did_not_happen": True, "note": "the receiver refused it: fixed its config"},
    )
    assert resumed.status_code == 200, resumed.text
    after = resumed.json()
    assert after["status"] == "executed"
    assert [s["status"] for s in after["steps"]] == ["executed"] * 3
    # The completed steps kept their receipts; the failed one ran under a new key.
    assert [s["receipt_id"] for s in after["steps"][:2]] == [
        s["receipt_id"] for s in body["steps"][:2]
    ]
    assert after["steps"][2]["receipt_id"] != body["steps"][2]["receipt_id"]
    assert _counts(github, slack, receiver, repo, channel, path) == (1, 1, 1)

    again = await plan_action(stack, body["plan_id"], "resume", {"effect_did_not_happen": True})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "plan_not_resumable"
