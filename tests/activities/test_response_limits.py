"""A provider's answer is read up to ``MOAT_HTTP_MAX_RESPONSE_BYTES``: a larger one is cut,
kept as its first bytes with the size read and its hash, and the envelope says so; JSON too
deep to record is one classified failure, not a retried crash."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from temporalio.exceptions import ApplicationError

from activities import HostGuard, HttpAdapter, http_client
from activities.adapters.responses import ERROR_BODY_BYTES
from schemas.records import RESPONSE_TRUNCATED
from schemas.run import AdapterInput
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import CATALOG, FAST_HTTP, Stack, StackFactory

LIMIT = 256 * 1024
HUGE = 64 * 1024 * 1024


@pytest_asyncio.fixture(loop_scope="session")
async def capped(make_stack: StackFactory, provider: FakeProvider) -> AsyncIterator[Stack]:
    async with make_stack(
        catalog=CATALOG, http_allow_hosts=[provider.allow_entry], http_max_response_bytes=LIMIT
    ) as s:
        yield s


async def _tool(stack: Stack, run_id: str) -> dict[str, Any]:
    path = stack.settings.manifests_dir / stack.tenant_id / run_id / "manifest.json"
    manifest = json.loads(await asyncio.to_thread(path.read_text))
    (tool,) = manifest["tools"]
    assert isinstance(tool, dict)
    return tool


async def test_a_huge_answer_is_cut_at_the_limit_and_says_so(
    capped: Stack, provider: FakeProvider
) -> None:
    url = provider.script("/huge", Step(200, stream_bytes=HUGE))
    payload = {"method": "GET", "url": url}
    response = await capped.execute("test.http", payload, key="huge")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "executed"
    assert [w["code"] for w in body["warnings"]] == [RESPONSE_TRUNCATED]
    assert body["receipt"]["status"] == "success"
    assert body["receipt"]["error_code"] == RESPONSE_TRUNCATED

    data = (await _tool(capped, body["run_id"]))["result"]["data"]
    assert data == body["output"]
    assert set(data) == {
        "status",
        "headers",
        "body",
        "truncated",
        "limit_bytes",
        "bytes_read",
        "bytes_read_sha256",
    }
    assert data["body"] == "x" * LIMIT
    assert data["truncated"] is True and data["limit_bytes"] == LIMIT
    # Reading stopped with the chunk that crossed the limit, far short of the answer.
    read = data["bytes_read"]
    assert LIMIT < read < LIMIT + 1024 * 1024
    assert data["bytes_read_sha256"] == "sha256:" + hashlib.sha256(b"x" * read).hexdigest()
    assert len(provider.calls_to("/huge")) == 1

    # The replay, answered from Postgres alone, carries the same warning.
    again = await capped.execute("test.http", payload, key="huge")
    assert again.headers["x-moat-idempotent-replayed"] == "true"
    assert again.json()["warnings"] == body["warnings"]
    assert again.json()["output"] == body["output"]
    assert len(provider.calls_to("/huge")) == 1


@pytest.mark.parametrize("depth", [100, 100_000])
async def test_json_nested_too_deep_is_one_classified_failure(
    capped: Stack, provider: FakeProvider, depth: int
) -> None:
    path = f"/nested-{depth}"
    url = provider.script(path, Step(200, raw=b"[" * depth + b"]" * depth))
    response = await capped.execute("test.http", {"method": "GET", "url": url})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "provider_invalid_response"
    assert error["details"]["provider_status"] == 200
    assert len(provider.calls_to(path)) == 1  # not retried: the call took effect
    tool = await _tool(capped, response.json()["run_id"])
    assert tool["result"]["error"].startswith("provider_invalid_response: ")


def _input(url: str) -> AdapterInput:
    return AdapterInput(
        tenant_id="ten_test",
        capability=FAST_HTTP,
        input={"method": "GET", "url": url},
        idempotency_key="moat-test-key",
        trace_id="0" * 32,
    )


async def test_an_answer_of_exactly_the_limit_is_kept_whole(provider: FakeProvider) -> None:
    document = json.dumps({"pad": "y" * 1000}).encode()
    url = provider.script("/exact", Step(200, raw=document))
    async with http_client() as client:
        whole = HttpAdapter(
            client, HostGuard([provider.allow_entry]), max_response_bytes=len(document)
        )
        out = await whole(_input(url))
        assert out.output["body"] == {"pad": "y" * 1000} and not out.truncated
        short = HttpAdapter(
            client, HostGuard([provider.allow_entry]), max_response_bytes=len(document) - 1
        )
        out = await short(_input(url))
    assert out.truncated and out.output["bytes_read"] == len(document)
    assert out.output["bytes_read_sha256"] == "sha256:" + hashlib.sha256(document).hexdigest()


async def test_json_outside_i_json_is_kept_as_text(provider: FakeProvider) -> None:
    document = b'{"id": 1152921504606846976}'  # beyond 2^53: no canonical form
    url = provider.script("/big-int", Step(200, raw=document))
    async with http_client() as client:
        out = await HttpAdapter(client, HostGuard([provider.allow_entry]))(_input(url))
    assert out.output["body"] == document.decode() and not out.truncated


async def test_a_failed_answer_is_classified_reading_only_the_start_of_its_body(
    provider: FakeProvider,
) -> None:
    url = provider.script("/boom", Step(500, stream_bytes=HUGE))
    async with http_client() as client:
        with pytest.raises(ApplicationError) as caught:
            await HttpAdapter(client, HostGuard([provider.allow_entry]))(_input(url))
    assert caught.value.type == "provider_server_error"
    assert caught.value.details[0]["http_status"] == 500
    assert caught.value.details[0]["provider_response"] == "x" * ERROR_BODY_BYTES
