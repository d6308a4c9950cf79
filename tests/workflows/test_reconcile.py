"""Exactly once where the provider has no idempotency key, end to end: gateway, workflow,
the real activities and Postgres, and the Slack and GitHub fakes.

A provider that performs the effect and then drops its answer makes Temporal retry the
adapter; the retry looks for the mark before posting, so there is one message / one issue
and the envelope carries its ``ts`` / ``number``. The same holds after ``temporal workflow
reset`` of the finished run, for a run resuming an execution whose run was terminated
mid-call, and for a storm of 100 duplicates. When the look-up is impossible the execution
ends ``outcome_unknown``, dead-lettered, and says so in its manifest."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import standardwebhooks
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from typer.testing import CliRunner

from activities.execute.adapter import AdapterStep
from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
    CapabilitySpec,
    EffectType,
    RetrySettings,
)
from schemas.events import EffectOrigin, Event, EventType, effect_origin
from schemas.run import AdapterInput, AdapterOutput
from starter.cli.runs import runs_app
from starter.devstack.providers import FakeGithub, FakeSlack, FakeWebhookReceiver, Misbehaviour
from store import events as event_log
from store import tenancy
from tests.evidence.independent_verifier import jws_ok
from tests.support.stack import Stack, StackFactory
from tests.workflows.test_replay import manifest_path, reset


def _fast(capability_id: str) -> Any:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    return spec.model_copy(
        update={
            "timeout_seconds": 2.0,
            "retry": RetrySettings(max_retries=3, base_delay_seconds=0.05),
        }
    )


CATALOG = CapabilityCatalog(
    (
        *(s for s in BUILTIN_CAPABILITIES if s.idempotency.value != "reconcile"),
        _fast("slack.post_message"),
        _fast("github.create_issue"),
    )
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


async def _slack_connection(stack: Stack, slack: FakeSlack, token: str = "xoxb-e2e") -> str:
    return await stack.add_connection("slack", token, config={"base_url": slack.base_url})


async def _github_connection(stack: Stack, github: FakeGithub) -> str:
    return await stack.add_connection("github", "ghp_e2e", config={"base_url": github.base_url})


def _channel() -> str:
    return "C" + uuid.uuid4().hex[:10].upper()


async def _events(stack: Stack, receipt_id: str) -> list[Event]:
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        return await event_log.events_of(session, stack.tenant_id, receipt_id)


def _types(events: list[Event]) -> list[str]:
    return [e.event_type.value for e in events]


async def test_slack_dropped_answer_leaves_one_message(
    stack: Stack, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = await _slack_connection(stack, slack)
    channel = _channel()
    slack.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "hi"}, connection_id=con
    )
    assert r.status_code == 200, r.text
    envelope = r.json()
    [message] = slack.posted(channel)
    assert envelope["status"] == "executed"
    assert envelope["output"] == {"channel": channel, "ts": message["ts"], "reconciled": True}
    events = await _events(stack, envelope["receipt_id"])
    types = _types(events)
    assert types.count("TOOL_CALLED") == 2
    assert types.count("TOOL_FAILED") == 1 and types.count("TOOL_COMPLETED") == 1
    [failed] = [e for e in events if e.event_type == EventType.TOOL_FAILED]
    assert failed.event_data["error_code"] == "network_error"
    assert failed.event_data["next_retry_at"] is not None
    assert failed.event_data["retry_count"] == 0
    [found] = [e for e in events if e.event_type == EventType.EFFECT_RECONCILED]
    assert found.event_data["found"] is True
    [done] = [e for e in events if e.event_type == EventType.TOOL_COMPLETED]
    assert done.event_data["reconciled"] is True and done.event_data["retry_count"] == 1
    for e in events:
        if e.event_type.value.startswith("TOOL_"):
            assert e.event_data["step_index"] == 1
            assert e.event_data["effect_id"] == f"{envelope['receipt_id']}:adapter"
    assert effect_origin(events) == EffectOrigin.RECONCILED

    # A fresh effect tells itself apart.
    fresh = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "two"}, connection_id=con
    )
    assert effect_origin(await _events(stack, fresh.json()["receipt_id"])) == EffectOrigin.FRESH
    # And so does the rebuild from the event log.
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url or "")
    monkeypatch.setenv("COLUMNS", "200")
    result = await asyncio.to_thread(
        CliRunner().invoke, runs_app, ["rebuild", "--tenant", stack.tenant_id, "--verify"]
    )
    assert result.exit_code == 0, result.output
    assert "effects: 1 fresh, 1 reconciled, 0 outcome unknown" in result.output
    assert envelope["receipt_id"] in result.output


async def test_github_late_answer_leaves_one_issue(stack: Stack, github: FakeGithub) -> None:
    con = await _github_connection(stack, github)
    repo = f"r{uuid.uuid4().hex[:8]}"
    github.fail_next(1, Misbehaviour.LATE, late_seconds=5)
    r = await stack.execute(
        "github.create_issue", {"owner": "o", "repo": repo, "title": "T"}, connection_id=con
    )
    assert r.status_code == 200, r.text
    [issue] = github.issues_of("o", repo)
    assert r.json()["output"]["number"] == issue["number"]
    assert r.json()["output"]["html_url"] == issue["html_url"]


async def test_reset_of_a_finished_run_posts_nothing_more(stack: Stack, slack: FakeSlack) -> None:
    con = await _slack_connection(stack, slack)
    channel = _channel()
    slack.fail_next(1)
    first = (
        await stack.execute(
            "slack.post_message", {"channel": channel, "text": "r"}, key=channel, connection_id=con
        )
    ).json()
    for kind in ("FirstWorkflowTask", "LastWorkflowTask"):
        run = (await stack.client.get_workflow_handle(first["workflow_id"]).describe()).run_id
        await reset(stack, first["workflow_id"], run, kind)
        assert len(slack.posted(channel)) == 1
    again = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "r"}, key=channel, connection_id=con
    )
    assert again.json()["output"]["ts"] == slack.posted(channel)[0]["ts"]


async def test_resumed_run_reconciles_before_its_first_attempt(
    stack: Stack, github: FakeGithub
) -> None:
    """A run terminated while its call was in flight: the next request with the key starts a
    new run that holds the key already, and looks before it creates."""
    con = await _github_connection(stack, github)
    repo = f"r{uuid.uuid4().hex[:8]}"
    payload = {"owner": "o", "repo": repo, "title": "resume"}
    github.fail_next(1, Misbehaviour.LATE, late_seconds=30)
    started = asyncio.create_task(
        stack.execute("github.create_issue", payload, key=repo, connection_id=con)
    )
    for _ in range(400):
        if github.issues_of("o", repo):
            break
        await asyncio.sleep(0.05)
    [issue] = github.issues_of("o", repo)
    handle = None
    async for wf in stack.client.list_workflows(f"TaskQueue = '{stack.settings.task_queue}'"):
        if wf.status == WorkflowExecutionStatus.RUNNING:
            handle = stack.client.get_workflow_handle(wf.id, run_id=wf.run_id)
    assert handle is not None
    await handle.terminate("ops: stuck call")
    await started
    github.fail_next(0)
    r = await stack.execute("github.create_issue", payload, key=repo, connection_id=con)
    assert r.status_code == 200, r.text
    assert r.json()["output"]["number"] == issue["number"]
    assert len(github.issues_of("o", repo)) == 1


async def test_duplicate_storm_leaves_one_message(stack: Stack, slack: FakeSlack) -> None:
    con = await _slack_connection(stack, slack)
    channel = _channel()
    slack.fail_next(1)
    body = {"channel": channel, "text": "storm"}
    responses = await asyncio.gather(
        *(
            stack.execute("slack.post_message", body, key=channel, connection_id=con)
            for _ in range(100)
        )
    )
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["receipt_id"] for r in responses}) == 1
    [message] = slack.posted(channel)
    assert {r.json()["output"]["ts"] for r in responses} == {message["ts"]}


async def test_history_refused_ends_outcome_unknown(stack: Stack, slack: FakeSlack) -> None:
    # A bot token without the channel's history scope.
    slack.scopes["xoxb-noread"] = {"chat:write"}
    con = await _slack_connection(stack, slack, "xoxb-noread")
    channel = _channel()
    slack.fail_next(1)
    r = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "?"}, connection_id=con
    )
    envelope = r.json()
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "outcome_unknown"
    assert envelope["receipt"]["error_code"] == "outcome_unknown"
    assert len(slack.posted(channel)) == 1  # posted once, never again
    events = await _events(stack, envelope["receipt_id"])
    [dead] = [e for e in events if e.event_type == EventType.EFFECT_DEAD_LETTERED]
    assert dead.event_data["outcome_unknown"] is True
    assert effect_origin(events) == EffectOrigin.OUTCOME_UNKNOWN
    manifest = json.loads(manifest_path(stack, stack.tenant_id, envelope["run_id"]).read_text())
    assert manifest["outputs"]["outcome_unknown"] is True
    assert manifest["outputs"]["compensating_action_ref"]
    assert manifest["outputs"]["status"] == "timeout"


async def test_a_last_attempt_failing_in_moat_after_a_lost_answer_is_outcome_unknown(
    stack: Stack, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos campaign's find: an attempt posts and loses its answer, then every later
    attempt fails in Moat's own steps (PostgreSQL down as it writes its start event) before
    it can look. Nothing settled whether the message exists: never a plain failure."""
    real = AdapterStep._adapter_events

    async def down_after_the_first(self: AdapterStep, *args: Any) -> None:
        if activity.info().attempt > 1:
            raise ConnectionError("the database is down")
        await real(self, *args)

    monkeypatch.setattr(AdapterStep, "_adapter_events", down_after_the_first)
    con = await _slack_connection(stack, slack)
    channel = _channel()
    slack.fail_next(1)
    r = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "?"}, connection_id=con
    )
    envelope = r.json()
    assert len(slack.posted(channel)) == 1
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "outcome_unknown", envelope["error"]
    assert envelope["receipt"]["error_code"] == "outcome_unknown"
    events = await _events(stack, envelope["receipt_id"])
    assert effect_origin(events) == EffectOrigin.OUTCOME_UNKNOWN
    manifest = json.loads(manifest_path(stack, stack.tenant_id, envelope["run_id"]).read_text())
    assert manifest["outputs"]["outcome_unknown"] is True
    [tool] = manifest["tools"]
    assert tool["result"]["error"].startswith("outcome_unknown: the last attempt failed in Moat")


SLEEPY = CapabilitySpec(
    id="test.sleepy",
    version="1.0.0",
    adapter="sleepy",
    adapter_id="sleepy-adapter-v1",
    effect_type=EffectType.API_CALL,
    timeout_seconds=0.2,
    retry=RetrySettings(max_retries=0, base_delay_seconds=0.05),
)


async def test_a_last_attempt_that_times_out_without_a_word_is_outcome_unknown(
    make_stack: StackFactory,
) -> None:
    """The chaos campaign's second find: a last attempt whose worker died after the provider
    acted ends in Temporal's start-to-close timeout; the effect may exist, so the outcome is
    unknown, not a plain timeout."""
    acted = asyncio.Event()

    async def acts_then_stalls(inp: AdapterInput, credential: object = None) -> AdapterOutput:
        acted.set()
        await asyncio.sleep(6.0)  # past the attempt's start-to-close timeout (5.2 s)
        raise AssertionError("unreachable")

    async with make_stack(adapters={"sleepy": acts_then_stalls}) as stack:
        result = await stack.start_direct(SLEEPY, {"anything": 1})
    receipt = result.receipt
    assert acted.is_set() and receipt is not None
    assert receipt.status == "timeout"
    assert receipt.error_code == "outcome_unknown"


async def test_capabilities_show_their_strategy(stack: Stack) -> None:
    caps = (await stack.http.get(f"{stack.url}/v1/capabilities")).json()
    shown = {c["id"]: (c["idempotency"], c["connection_types"]) for c in caps}
    assert shown["slack.post_message"] == ("reconcile", ["slack"])
    assert shown["github.create_issue"] == ("reconcile", ["github"])
    assert shown["webhook.post"] == ("provider_key", ["webhook"])
    assert shown["http.request"][0] == "provider_key"
    assert shown["demo.echo"] == ("none", [])


async def test_webhook_retries_keep_one_id_and_verify(
    stack: Stack, receiver: FakeWebhookReceiver
) -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    con = await stack.add_connection("webhook", secret, config={"base_url": receiver.base_url})
    receiver.fail_next(1)
    data = {"url": f"{receiver.base_url}/in", "event_type": "invoice.paid", "payload": {"n": 7}}
    r = await stack.execute("webhook.post", data, connection_id=con)
    assert r.status_code == 200, r.text
    attempts = [d for d in receiver.deliveries if d.path == "/in"]
    ids = {d.id for d in attempts}
    assert len(attempts) == 2 and len(ids) == 1  # one webhook-id across the retry
    assert ids <= set(receiver.events)  # and one event at the receiver
    verifier = standardwebhooks.Webhook(secret)
    for delivery in attempts:
        assert verifier.verify(delivery.body, delivery.headers)["data"] == {"n": 7}


async def test_the_receipt_carries_the_provider_evidence_and_its_reconcile_proof(
    stack: Stack, slack: FakeSlack
) -> None:
    """A message whose answer was lost, found by the retry's look-up: its receipt, read back
    from Postgres over the API, names the message, its permalink and the search that found it."""
    con = await _slack_connection(stack, slack)
    channel = _channel()
    slack.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute(
        "slack.post_message", {"channel": channel, "text": "hi"}, connection_id=con
    )
    assert r.status_code == 200, r.text
    [message] = slack.posted(channel)
    got = await stack.http.get(
        f"{stack.url}/v1/receipts/{r.json()['receipt_id']}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert got.status_code == 200, got.text
    evidence = got.json()["provider_evidence"]
    assert evidence["object_id"] == f"{channel}/{message['ts']}"
    assert evidence["attributes"] == {"channel": channel, "ts": message["ts"]}
    assert evidence["permalink"].endswith(f"/archives/{channel}/p{message['ts'].replace('.', '')}")
    proof = evidence["reconciled"]
    assert proof["search"]["method"] == "conversations.history"
    assert proof["search"]["channel"] == channel
    assert proof["attempt"] == 2
    # The manifest names it too, as the artifact the call left, and still verifies.
    manifest = await stack.http.get(
        f"{stack.url}/v1/executions/{r.json()['receipt_id']}/manifest",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert manifest.status_code == 200, manifest.text
    [artifact] = manifest.json()["artifacts"]
    assert artifact["type"] == "state_change"
    assert artifact["location"] == evidence["permalink"]
    assert artifact["metadata"]["reconciled"]["attempt"] == 2
    jwks = (await stack.http.get(f"{stack.url}/.well-known/jwks.json")).json()
    assert jws_ok(json.loads(manifest.content), {k["kid"]: k for k in jwks["keys"]})
