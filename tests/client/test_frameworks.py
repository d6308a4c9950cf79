"""The agent frameworks' adapters (``moat_client.frameworks``) against the live gateway,
each in its framework's own environment (``make frameworks``: the framework from the package
index, hash-checked against starter/client/frameworks/<name>.lock) and driven by the
framework's scripted model: no model provider is called.

Each runs its example agent (examples/<name>/agent.py) through five tool calls: one, the
framework's retry of it (same call id), a new call with the same input (new id), a call the
policy refuses and one held for a person's approval. The retry is a replay (one effect on
the provider), the new id a new execution, the refusal and the held call results the model
reads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.client.test_install import run
from tests.gateway.test_policy import bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, repo_root

HELD = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
# A port the tenant's allow-list does not name: the policy refuses before any connection.
REFUSED_URL = "http://127.0.0.1:9/refused"
# The key each framework gives call ``call-1`` of http.request (its scope: the driver's
# thread or run).
KEYS = {
    "openai-agents": "openai-agents:http.request:{call}",
    "langchain": "langchain:thread-1:http.request:{call}",
    "pydantic-ai": "pydantic-ai:run-1:http.request:{call}",
}


def framework_python(name: str) -> Path:
    """The framework's environment, or a failure naming the command that builds it."""
    venv = repo_root() / ".venv-frameworks" / name
    stamp, lock = venv / ".installed", repo_root() / "starter/client/frameworks" / f"{name}.lock"
    # The stamp holds the SHA-256 of the lock the environment was built from.
    built = stamp.read_text().strip() if stamp.exists() else None
    if built != hashlib.sha256(lock.read_bytes()).hexdigest():
        pytest.fail(f"{name}'s environment is missing or not its lock's: run `make frameworks`")
    return venv / "bin" / "python"


async def drive(stack: Stack, name: str, calls: list[dict[str, Any]]) -> list[str]:
    """What the model read back from each call, as the framework's driver printed it."""
    driver = Path(__file__).parent / "frameworks" / f"{name.replace('-', '_')}_driver.py"
    output = await run(
        framework_python(name),
        driver,
        json.dumps(calls),
        cwd=repo_root(),
        env={"MOAT_URL": stack.url, "MOAT_API_KEY": stack.api_key},
    )
    answers: list[str] = json.loads(output.strip().splitlines()[-1])
    return answers


async def receipts_of(stack: Stack, key: str) -> list[dict[str, Any]]:
    page = await stack.http.get(
        f"{stack.url}/v1/receipts",
        params={"idempotency_key": key},
        headers=bearer(stack.api_key),
    )
    assert page.status_code == 200, page.text
    items: list[dict[str, Any]] = page.json()["items"]
    return items


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["openai-agents", "langchain", "pydantic-ai"])
async def test_a_framework_retry_is_a_replay(
    name: str, stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script(f"/{name}", Step(201, {"ok": True}))
    await put_policy(stack, await new_key(stack, ["policy:write"]), HELD)
    post = {"method": "POST", "url": url, "json": {"n": 1}}
    calls = [
        {"tool": "http_request", "args": post, "call_id": "call-1"},
        {"tool": "http_request", "args": post, "call_id": "call-1"},
        {"tool": "http_request", "args": post, "call_id": "call-2"},
        {"tool": "http_request", "args": {"method": "GET", "url": REFUSED_URL}, "call_id": "c3"},
        {"tool": "demo_echo", "args": {"hello": "world"}, "call_id": "call-4"},
    ]
    first, retried, new, refused, held = await drive(stack, name, calls)

    # The call ran once; the retry of the same call id read its outcome back.
    assert json.loads(first)["status"] == 201, first
    assert retried == first and json.loads(new)["status"] == 201
    assert len(provider.effects_on(f"/{name}")) == 2  # call-1 once, call-2 once
    once = await receipts_of(stack, KEYS[name].format(call="call-1"))
    assert [r["status"] for r in once] == ["success"], once
    again = await receipts_of(stack, KEYS[name].format(call="call-2"))
    assert [r["status"] for r in again] == ["success"] and again[0]["id"] != once[0]["id"]

    # A refusal and a held call are results the model reads; the run went on.
    said = json.loads(refused)
    assert (said["status"], said["code"]) == ("refused", "host_not_allowed"), said
    assert said["receipt_id"] and "nothing ran" in said["message"]
    waiting = json.loads(held)
    assert waiting["status"] == "awaiting_approval", waiting
    assert waiting["approval_id"].startswith("apr_") and waiting["receipt_id"]
