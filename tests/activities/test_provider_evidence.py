"""What an effect left at the provider, as the adapters report it for the receipt: a Slack
message's channel, ts and permalink, a GitHub issue's number, node id and page, a webhook's
id and the digest of the answer, and, for an effect found by a reconcile look-up, how it
was found. The record step keeps it on the receipt, in its RFC 8785 form (which the
transparency log hashes) and in Postgres."""

from __future__ import annotations

import base64
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import rfc8785
from temporalio.exceptions import ApplicationError

from activities import GithubAdapter, HostGuard, SlackAdapter, WebhookAdapter, http_client
from activities.adapters.github import mark
from activities.execute.record import _receipt
from schemas.capabilities import CapabilityCatalog, RetrySettings
from schemas.connections import ConnectionType, Credential
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.provider_evidence import ProviderEvidence, ReconcileProof
from schemas.records import Receipt
from schemas.run import AdapterInput, RecordInput
from starter.devstack.providers import FakeGithub, FakeSlack, FakeWebhookReceiver
from starter.gateway import console
from starter.gateway.console.render import environment

TOKEN = "xoxb-test-token"


@pytest.fixture
async def http() -> Any:
    client = http_client()
    yield client
    await client.aclose()


def _input(capability_id: str, data: dict[str, Any], allow: str) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    retry = RetrySettings(max_retries=3, base_delay_seconds=0.01)
    spec = spec.model_copy(update={"timeout_seconds": 1.0, "retry": retry})
    return AdapterInput(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        capability=spec,
        input=data,
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow],
    )


def _cred(kind: ConnectionType, secret: str, base_url: str) -> Credential:
    return Credential("con_test", kind, secret, {"base_url": base_url})


async def test_a_slack_post_carries_channel_ts_and_permalink(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    channel = "C" + uuid.uuid4().hex[:10].upper()
    inp = _input("slack.post_message", {"channel": channel, "text": "hi"}, slack.allow_entry)
    out = await SlackAdapter(http, HostGuard([]))(
        inp, _cred(ConnectionType.SLACK, TOKEN, slack.base_url)
    )
    [message] = slack.posted(channel)
    ts = message["ts"]
    assert out.evidence == ProviderEvidence(
        provider="slack",
        object_type="message",
        object_id=f"{channel}/{ts}",
        permalink=f"{slack.base_url}/archives/{channel}/p{ts.replace('.', '')}",
        attributes={"channel": channel, "ts": ts},
        http_status=200,
    )


async def test_a_reconciled_slack_post_carries_the_search_that_found_it(
    slack: FakeSlack, http: httpx.AsyncClient
) -> None:
    adapter = SlackAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.SLACK, TOKEN, slack.base_url)
    channel = "C" + uuid.uuid4().hex[:10].upper()
    inp = _input("slack.post_message", {"channel": channel, "text": "once"}, slack.allow_entry)
    slack.fail_next(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    [message] = slack.posted(channel)
    out = await adapter(inp.model_copy(update={"attempt": 2}), cred)
    assert out.reconciled is True and out.evidence is not None
    assert out.evidence.object_id == f"{channel}/{message['ts']}"
    assert out.evidence.permalink is not None
    proof = out.evidence.reconciled
    assert proof is not None and proof.attempt == 2
    assert proof.looked_in == f"the history of channel {channel}"
    assert proof.search["method"] == "conversations.history"
    assert proof.search["channel"] == channel
    assert proof.search["include_all_metadata"] == "true"
    assert inp.idempotency_key in proof.mark
    assert proof.since is not None and proof.since < datetime.now(UTC)


async def test_a_github_issue_carries_its_url_and_a_reconciled_one_the_list_read(
    github: FakeGithub, http: httpx.AsyncClient
) -> None:
    adapter = GithubAdapter(http, HostGuard([]))
    cred = _cred(ConnectionType.GITHUB, "ghp_test", github.base_url)
    owner, repo = "acme", "r" + uuid.uuid4().hex[:8]
    data = {"owner": owner, "repo": repo, "title": "Bug"}
    first = await adapter(_input("github.create_issue", data, github.allow_entry), cred)
    [issue] = github.issues_of(owner, repo)
    assert first.evidence == ProviderEvidence(
        provider="github",
        object_type="issue",
        object_id=issue["node_id"],
        permalink=issue["html_url"],
        attributes={"number": issue["number"], "id": issue["id"]},
        http_status=201,
    )
    inp = _input("github.create_issue", {**data, "title": "Again"}, github.allow_entry)
    github.fail_next(1)
    with pytest.raises(ApplicationError):
        await adapter(inp, cred)
    again = await adapter(inp.model_copy(update={"attempt": 2}), cred)
    assert again.evidence is not None and again.evidence.reconciled is not None
    assert again.evidence.permalink == github.issues_of(owner, repo)[-1]["html_url"]
    proof = again.evidence.reconciled
    assert proof.search["state"] == "all" and proof.search["url"].endswith(f"/{repo}/issues")
    assert mark(inp.idempotency_key) in proof.mark


async def test_a_webhook_carries_its_id_and_the_digest_of_the_answer(
    http: httpx.AsyncClient,
) -> None:
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    with FakeWebhookReceiver() as receiver:
        data = {"url": f"{receiver.base_url}/hook", "event_type": "t.e", "payload": {"a": 1}}
        inp = _input("webhook.post", data, receiver.allow_entry)
        cred = _cred(ConnectionType.WEBHOOK, secret, receiver.base_url)
        out = await WebhookAdapter(http, HostGuard([]))(inp, cred)
    assert out.evidence is not None
    assert out.evidence.provider == "webhook"
    assert out.evidence.object_id == inp.idempotency_key
    assert out.evidence.http_status == out.http_status
    assert out.evidence.response_sha256 is not None
    assert out.evidence.response_sha256.startswith("sha256:")


def test_the_receipt_keeps_the_evidence_and_reads_old_payloads() -> None:
    evidence = ProviderEvidence(
        provider="slack",
        object_id="C1/1.000100",
        reconciled=ReconcileProof(looked_in="the history of channel C1", mark="k"),
    )
    spec = CapabilityCatalog().get("slack.post_message")
    assert spec is not None
    now = datetime.now(UTC)
    ref = ExecutionRef(
        tenant_id="t1",
        receipt_id=str(uuid7()),
        idempotency_key="k1",
        input_hash="sha256:" + "0" * 64,
        workflow_id="wf",
        run_id="run",
    )
    record = RecordInput(
        ref=ref,
        capability=spec,
        request_id="req",
        trace_id="0" * 32,
        submitted_at=now,
        policy_decision_id="p",
        success=True,
        status="success",
        provider_evidence=evidence,
    )
    receipt = _receipt(record, now)
    assert receipt.provider_evidence == evidence
    # The log's leaf: the receipt's RFC 8785 bytes, its evidence included.
    canonical = rfc8785.dumps(receipt.model_dump(mode="json"))
    assert b'"provider_evidence":{' in canonical
    assert Receipt.model_validate_json(canonical) == receipt
    old = receipt.model_dump(mode="json")
    del old["provider_evidence"]
    assert Receipt.model_validate(old).provider_evidence is None


def test_the_console_shows_where_the_effect_is_and_links_only_web_addresses() -> None:
    """The receipt's line on the execution's page (its template's own line, rendered)."""
    env = environment()
    env.get_template("execution.html")  # the page's template compiles
    source = (Path(console.__file__).parent / "templates" / "execution.html").read_text()
    [line] = [ln for ln in source.splitlines() if "r.provider_evidence" in ln]
    snippet = env.from_string(line)
    proof = ReconcileProof(looked_in="the history of channel C1", mark="k", attempt=2)
    evidence = ProviderEvidence(
        provider="slack",
        object_type="message",
        object_id="C1/1.000100",
        permalink="https://acme.example/archives/C1/p1000100",
        reconciled=proof,
    )
    r = SimpleNamespace(provider_evidence=evidence)
    html = snippet.render(r=r)
    assert "slack message <code>C1/1.000100</code>" in html
    assert '<a href="https://acme.example/archives/C1/p1000100"' in html
    assert "found by a look-up in the history of channel C1 (attempt 2)" in html
    hostile = evidence.model_copy(update={"permalink": "javascript:alert(1)", "reconciled": None})
    assert "<a" not in snippet.render(r=SimpleNamespace(provider_evidence=hostile))
    assert snippet.render(r=SimpleNamespace(provider_evidence=None)).strip() == ""
