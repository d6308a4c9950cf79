"""The remote codec endpoint: ops decode Moat's encrypted payloads in the Temporal UI and CLI,
and nobody else can."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType

from starter.devstack import temporal_binary
from starter.runtime.codec_door import Door, current_token, door_path, rotate
from tests.support.stack import ADMIN_KEY, Stack, StackFactory, repo_root

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
UI_ORIGIN = "http://127.0.0.1:8233"
MARKER = "codec-marker-7f3a"


async def _started_input(stack: Stack, workflow_id: str) -> dict[str, Any]:
    """The run's input payloads exactly as Temporal stores them, in proto3 JSON."""
    history = await stack.client.get_workflow_handle(workflow_id).fetch_history()
    started = next(
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    )
    stored = Payloads(payloads=started.workflow_execution_started_event_attributes.input.payloads)
    return json_format.MessageToDict(stored)


def door_token(stack: Stack) -> str:
    """The current token of the Web UI's codec door (the session's door file, created on
    first use as in development)."""
    return current_token(stack.settings)


def _texts(answer: dict[str, Any]) -> list[str]:
    return [
        base64.b64decode(p.get("data", "")).decode(errors="replace") for p in answer["payloads"]
    ]


async def _run(stack: Stack, key: str) -> str:
    response = await stack.execute("demo.echo", {"note": MARKER}, key=key)
    assert response.status_code == 200, response.text
    workflow_id: str = response.json()["workflow_id"]
    return workflow_id


async def test_ui_door_decodes_a_stored_run_input(stack: Stack) -> None:
    stored = await _started_input(stack, await _run(stack, "codec-ui"))
    assert MARKER not in json.dumps(stored)
    assert MARKER not in "".join(_texts(stored))  # ciphertext, even base64-decoded
    url = f"{stack.url}/codec/ui/{door_token(stack)}/decode"
    answer = await stack.http.post(url, json=stored, headers={"X-Namespace": "moat"})
    assert answer.status_code == 200, answer.text
    decoded = answer.json()
    assert MARKER in "".join(_texts(decoded))
    encodings = {base64.b64decode(p["metadata"]["encoding"]) for p in decoded["payloads"]}
    assert encodings == {b"json/plain"}


async def test_encode_then_decode_round_trips(stack: Stack) -> None:
    plain = {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'{"signal":"approve"}').decode(),
            }
        ]
    }
    encoded = await stack.http.post(f"{stack.url}/codec/encode", json=plain, headers=ADMIN)
    assert encoded.status_code == 200, encoded.text
    payload = encoded.json()["payloads"][0]
    assert base64.b64decode(payload["metadata"]["encoding"]) == b"binary/encrypted"
    assert b"approve" not in base64.b64decode(payload["data"])
    decoded = await stack.http.post(f"{stack.url}/codec/decode", json=encoded.json(), headers=ADMIN)
    assert decoded.status_code == 200, decoded.text
    assert decoded.json() == plain


async def test_decode_shows_payloads_no_codec_wrote_as_they_are(stack: Stack) -> None:
    # History holds some (a header, a run someone started without the codec): ops still
    # read them, while the worker refuses them as input.
    plain = {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'{"started":"elsewhere"}').decode(),
            }
        ]
    }
    decoded = await stack.http.post(f"{stack.url}/codec/decode", json=plain, headers=ADMIN)
    assert decoded.status_code == 200, decoded.text
    assert decoded.json() == plain


def _derived_from_the_admin_key() -> str:
    """The UI token as it used to be made: a function of the admin key, never expiring."""
    digest = hmac.new(ADMIN_KEY.encode(), b"moat codec endpoint for the Temporal UI", "sha256")
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


async def test_decoding_needs_the_admin_key_or_the_ui_token(stack: Stack) -> None:
    body = {"payloads": []}
    door_token(stack)  # the door is set up: what follows is refused for its token alone
    cases = [
        (f"{stack.url}/codec/decode", {}, 401, "unauthenticated"),
        (f"{stack.url}/codec/decode", {"Authorization": "Bearer nope"}, 401, "unauthenticated"),
        # A tenant's key reads its own receipts, never the raw payloads of every tenant.
        (
            f"{stack.url}/codec/decode",
            {"Authorization": f"Bearer {stack.api_key}"},
            403,
            "forbidden",
        ),
        (f"{stack.url}/codec/ui/not-the-token/decode", {}, 401, "unauthenticated"),
        (f"{stack.url}/codec/ui/{ADMIN_KEY}/decode", {}, 401, "unauthenticated"),
        # The door has its own secret: knowing the admin key gives no UI address.
        (
            f"{stack.url}/codec/ui/{_derived_from_the_admin_key()}/decode",
            {},
            401,
            "unauthenticated",
        ),
    ]
    for url, headers, status, code in cases:
        answer = await stack.http.post(url, json=body, headers=headers)
        assert answer.status_code == status, (url, answer.text)
        assert answer.json()["error"]["code"] == code


async def test_each_door_is_off_without_its_secret(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    # No admin key: the admin door is off; the UI door has a secret of its own.
    async with make_stack(admin_api_key=None) as stack:
        answer = await stack.http.post(
            f"{stack.url}/codec/decode", json={"payloads": []}, headers=ADMIN
        )
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "forbidden"
        url = f"{stack.url}/codec/ui/{door_token(stack)}/decode"
        assert (await stack.http.post(url, json={"payloads": []})).status_code == 200
    # No door file: the UI door is off (a gateway never creates one), whatever the token.
    async with make_stack(codec_door=tmp_path / "missing.json") as stack:
        for token in ("x" * 43, _derived_from_the_admin_key()):
            url = f"{stack.url}/codec/ui/{token}/decode"
            answer = await stack.http.post(url, json={"payloads": []})
            assert answer.status_code == 403
            assert answer.json()["error"]["code"] == "forbidden"


async def test_bad_payloads_are_refused_with_the_envelope(stack: Stack) -> None:
    stored = await _started_input(stack, await _run(stack, "codec-bad"))
    tampered = json.loads(json.dumps(stored))
    data = bytearray(base64.b64decode(tampered["payloads"][0]["data"]))
    data[-1] ^= 0x01
    tampered["payloads"][0]["data"] = base64.b64encode(bytes(data)).decode()
    url = f"{stack.url}/codec/decode"
    answer = await stack.http.post(url, json=tampered, headers=ADMIN)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "payload_not_decodable"
    for body in ({"payloads": [{"data": "%%% not base64"}]}, {"payloads": "x"}, {}):
        answer = await stack.http.post(url, json=body, headers=ADMIN)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"] == "schema_validation_failed"


async def test_cors_admits_the_ui_origin_on_codec_paths_only(make_stack: StackFactory) -> None:
    async with make_stack(codec_cors_origins=[UI_ORIGIN]) as stack:
        url = f"{stack.url}/codec/ui/{door_token(stack)}/decode"
        preflight = {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace",
        }
        ok = await stack.http.options(url, headers={"Origin": UI_ORIGIN, **preflight})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == UI_ORIGIN
        other = await stack.http.options(url, headers={"Origin": "http://evil.test", **preflight})
        assert "access-control-allow-origin" not in other.headers
        answer = await stack.http.post(url, json={"payloads": []}, headers={"Origin": UI_ORIGIN})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == UI_ORIGIN
        # The tenant API stays same-origin: no browser page may call it with a user's key.
        receipts = await stack.http.get(f"{stack.url}/v1/receipts", headers={"Origin": UI_ORIGIN})
        assert "access-control-allow-origin" not in receipts.headers


async def test_temporal_cli_shows_decoded_history_through_the_codec(stack: Stack) -> None:
    workflow_id = await _run(stack, "codec-cli")
    base = [
        str(temporal_binary()),
        "workflow",
        "show",
        "--workflow-id",
        workflow_id,
        "--namespace",
        stack.settings.temporal_namespace,
        "--address",
        stack.client.service_client.config.target_host,
        "--output",
        "json",
    ]

    def started_input(*extra: str) -> list[dict[str, Any]]:
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        first = json.loads(done.stdout)["events"][0]
        payloads: list[dict[str, Any]] = first["workflowExecutionStartedEventAttributes"]["input"][
            "payloads"
        ]
        return payloads

    raw = await asyncio.to_thread(started_input)
    assert {base64.b64decode(p["metadata"]["encoding"]) for p in raw} == {b"binary/encrypted"}
    assert MARKER not in "".join(_texts({"payloads": raw}))
    decoded = await asyncio.to_thread(
        started_input,
        "--codec-endpoint",
        f"{stack.url}/codec",
        "--codec-auth",
        f"Bearer {ADMIN_KEY}",
    )
    assert {base64.b64decode(p["metadata"]["encoding"]) for p in decoded} == {b"json/plain"}
    assert MARKER in "".join(_texts({"payloads": decoded}))


async def test_the_ui_token_stays_out_of_traces_and_logs(stack: Stack) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from schemas.redaction import redact_text

    token = door_token(stack)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    spans = InMemorySpanExporter()
    processor = SimpleSpanProcessor(spans)
    provider.add_span_processor(processor)
    try:
        answer = await stack.http.post(
            f"{stack.url}/codec/ui/{token}/decode", json={"payloads": []}
        )
    finally:
        processor.shutdown()
    assert answer.status_code == 200
    names = [s.name for s in spans.get_finished_spans()]
    assert "POST /codec/ui/{token}/decode" in names  # the route's template, not the path
    assert not [n for n in names if token in n]
    assert token not in redact_text(f"GET {stack.url}/codec/ui/{token}/decode 200")


async def test_the_ui_door_only_decodes(stack: Stack) -> None:
    plain = {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'{"tenant_id":"anyone"}').decode(),
            }
        ]
    }
    url = f"{stack.url}/codec/ui/{door_token(stack)}/encode"
    answer = await stack.http.post(url, json=plain, headers={"X-Namespace": "moat"})
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "forbidden"
    assert "binary/encrypted" not in answer.text


async def test_a_rotated_token_keeps_working_for_its_grace_only(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    async with make_stack(codec_door=tmp_path / "door.json") as stack:
        first = rotate(stack.settings)  # a configured door file is created by rotating

        async def status(token: str) -> int:
            url = f"{stack.url}/codec/ui/{token}/decode"
            return (await stack.http.post(url, json={"payloads": []})).status_code

        assert await status(first) == 200
        second = rotate(stack.settings, grace=timedelta(hours=1))
        assert (await status(first), await status(second)) == (200, 200)  # within grace
        third = rotate(stack.settings, grace=timedelta(0))  # e.g. the second one leaked
        assert (await status(second), await status(third)) == (401, 200)
        assert await status(first) == 200  # still within its own grace

        # After the grace period (time moved on instead of waiting for it).
        door = Door.read(door_path(stack.settings))
        later = datetime.now(UTC) + timedelta(hours=1, seconds=1)
        assert door.admits(third, later)
        assert not door.admits(first, later) and not door.admits(second, later)
        assert door.admits(first, later - timedelta(seconds=2))


def test_moat_codec_rotate_and_url(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOAT_")}
    env["MOAT_HOME"] = str(tmp_path)

    def moat(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "starter.cli", *args],
            cwd=repo_root(),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done

    old = moat("codec", "url").stdout.strip()
    assert old.startswith("http://127.0.0.1:8000/codec/ui/")
    assert moat("codec-url").stdout.strip() == old  # the older spelling still answers
    rotated = moat("codec", "rotate", "--grace", "600")
    new = rotated.stdout.strip()
    assert new != old and moat("codec", "url").stdout.strip() == new
    assert "600 s" in rotated.stderr
    path = tmp_path / "codec-door.json"
    assert path.stat().st_mode & 0o777 == 0o600
    stored = path.read_text()
    old_token = old.rsplit("/", 1)[1]
    assert old_token not in stored  # a retired token is kept as a hash only
    door = Door.read(path)
    assert door.admits(old_token, datetime.now(UTC))
    assert not door.admits(old_token, datetime.now(UTC) + timedelta(seconds=601))
