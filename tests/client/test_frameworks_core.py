"""What the agent frameworks' adapters share (``moat_client.frameworks._core``), without a
server or a framework: one key per tool call, tool names every provider accepts, the
outcome the model reads, and the base client importing no framework."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from moat_client import AsyncMoatClient, CapabilityInfo, GatewayUnavailable, MoatClient, RetryPolicy
from moat_client.frameworks._core import (
    MAX_KEY,
    acatalog,
    aexecute,
    call_key,
    catalog,
    execute,
    tool_name,
)

RECEIPT = "0194d6c2-0000-7000-8000-000000000000"


def client_answering(status: int, body: dict[str, Any]) -> MoatClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"trace_id": "t", **body})

    return MoatClient(
        "http://gateway.test",
        "moat_x_y",
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(max_attempts=1),
    )


def test_one_key_per_call_id_within_its_framework_and_scope() -> None:
    key = call_key("langchain", "slack.post_message", "call_1", "thread-9")
    assert key == "langchain:thread-9:slack.post_message:call_1"
    assert call_key("langchain", "slack.post_message", "call_1", "thread-9") == key
    assert call_key("langchain", "slack.post_message", "call_2", "thread-9") != key
    assert call_key("pydantic-ai", "slack.post_message", "call_1", "thread-9") != key
    long = call_key("openai-agents", "demo.echo", "c" * 300)
    assert len(long) <= MAX_KEY and long.startswith("openai-agents:sha256:")
    assert long == call_key("openai-agents", "demo.echo", "c" * 300)
    assert long != call_key("openai-agents", "demo.echo", "c" * 299)


def test_tool_names_use_only_what_every_provider_accepts() -> None:
    assert tool_name("slack.post_message") == "slack_post_message"
    assert tool_name("a.b/c d") == "a_b_c_d"
    assert len(tool_name("x" * 100)) == 64


def test_a_policy_refusal_is_told_not_raised() -> None:
    refusal = {
        "receipt_id": RECEIPT,
        "status": "failed",
        "error": {"code": "budget_exceeded", "message": "the budget is used up"},
    }
    with client_answering(403, refusal) as moat:
        outcome = execute(moat, "demo.echo", {}, "k")
    said = json.loads(outcome.message)
    assert not outcome.ok and outcome.receipt_id == RECEIPT
    assert said["status"] == "refused" and said["code"] == "budget_exceeded"
    assert "nothing ran" in said["message"] and said["receipt_id"] == RECEIPT


def test_a_providers_failure_is_told_with_its_receipt() -> None:
    failed = {
        "receipt_id": RECEIPT,
        "status": "failed",
        "error": {"code": "downstream_error", "message": "slack said no"},
    }
    with client_answering(502, failed) as moat:
        outcome = execute(moat, "slack.post_message", {}, "k")
    said = json.loads(outcome.text)
    assert said == {
        "status": "failed",
        "capability": "slack.post_message",
        "code": "downstream_error",
        "message": "slack said no",
        "receipt_id": RECEIPT,
    }


def test_no_answer_is_raised_for_the_framework_to_retry_with_the_same_key() -> None:
    unavailable = client_answering(503, {"error": {"code": "unavailable", "message": "x"}})
    with unavailable as moat, pytest.raises(GatewayUnavailable) as lost:
        execute(moat, "demo.echo", {}, "openai-agents:demo.echo:call_1")
    assert lost.value.idempotency_key == "openai-agents:demo.echo:call_1"


def test_the_client_imports_no_framework() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, moat_client, moat_client.frameworks, moat_client.frameworks._core;"
            "print(sorted(m for m in ('agents', 'langchain_core', 'pydantic_ai') "
            "if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"


async def test_a_blocking_client_runs_in_a_thread_for_async_frameworks() -> None:
    executed = {"receipt_id": RECEIPT, "status": "executed", "output": {"echo": 1}}
    with client_answering(200, executed) as moat:
        outcome = await aexecute(moat, "demo.echo", {"echo": 1}, "k")
    assert outcome.ok and outcome.output == {"echo": 1} and outcome.text == '{"echo": 1}'
    assert outcome.receipt_id == RECEIPT and outcome.message == ""


def capability(id: str) -> dict[str, Any]:
    return {
        "id": id,
        "version": "1",
        "adapter": "demo",
        "adapter_id": "demo",
        "description": f"{id} for tests",
        "effect_type": "none",
        "required_scopes": [],
        "timeout_seconds": 5,
        "requires_approval": False,
        "retry": {"max_retries": 0, "base_delay_seconds": 1},
        "input_schema": {"type": "object"},
    }


def catalog_transport(reads: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        reads.append(request.url.path)
        return httpx.Response(200, json=[capability("demo.echo"), capability("http.request")])

    return httpx.MockTransport(answer)


async def test_tools_are_made_of_the_whole_catalog_or_the_capabilities_named() -> None:
    reads: list[str] = []
    with MoatClient("http://gateway.test", "moat_x_y", transport=catalog_transport(reads)) as moat:
        assert [c.id for c in catalog(moat)] == ["demo.echo", "http.request"]
        assert [c.id for c in catalog(moat, ["http.request"])] == ["http.request"]
        with pytest.raises(ValueError, match="no capability 'nope'"):
            catalog(moat, ["nope"])
        given = CapabilityInfo.model_validate(capability("given.one"))
        assert catalog(moat, [given]) == [given]  # nothing to read
    assert reads == ["/v1/capabilities"] * 3

    async with AsyncMoatClient(
        "http://gateway.test", "moat_x_y", transport=catalog_transport(reads)
    ) as amoat:
        assert [c.id for c in await acatalog(amoat, ["demo.echo"])] == ["demo.echo"]
    assert len(reads) == 4
