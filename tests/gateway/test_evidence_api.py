"""Evidence over HTTP: events, the stored manifest, and the JWKS that verifies it offline."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import jwt
from typer.testing import CliRunner

from schemas.manifest import signing_input
from starter.cli.manifests import manifest_app
from tests.support.stack import Stack


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_events_route(stack: Stack) -> None:
    body = (await stack.execute("demo.echo", {"ev": 1}, key="ev-api")).json()
    response = await stack.http.get(
        f"{stack.url}/v1/executions/{body['receipt_id']}/events", headers=auth(stack.api_key)
    )
    assert response.status_code == 200
    events = response.json()
    assert events[0]["event_type"] == "SIGNAL_RECEIVED"
    assert events[-1]["event_type"] == "MANIFEST_WRITTEN"
    seqs = [e["sequence_number"] for e in events]
    assert seqs == sorted(seqs)
    _, other = await stack.new_tenant()
    response = await stack.http.get(
        f"{stack.url}/v1/executions/{body['receipt_id']}/events", headers=auth(other)
    )
    assert response.status_code == 404


async def test_manifest_verifies_offline_with_a_generic_jws_library(
    stack: Stack, tmp_path: Path
) -> None:
    body = (await stack.execute("demo.echo", {"audit": "me"}, key="mf-api")).json()
    response = await stack.http.get(
        f"{stack.url}/v1/executions/{body['receipt_id']}/manifest", headers=auth(stack.api_key)
    )
    assert response.status_code == 200, response.text
    data = response.content
    assert (
        response.headers["x-moat-manifest-sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    )
    manifest = json.loads(data)
    assert manifest["correlation_id"] == body["receipt_id"]
    assert manifest["run_id"] == body["run_id"] and manifest["replayed"] is False
    assert manifest["tools"][0]["tool_name"] == "demo.echo"

    jwks = (await stack.http.get(f"{stack.url}/.well-known/jwks.json")).json()
    assert all("d" not in k for k in jwks["keys"])  # public halves only
    # An auditor with only the file and the JWKS, using PyJWT (not Moat's code) to verify:
    payload = base64.urlsafe_b64encode(signing_input(manifest)).rstrip(b"=").decode()
    for signature in manifest["signatures"]:
        header, _, sig = signature["signature"].split(".")
        kid = json.loads(base64.urlsafe_b64decode(header + "==").decode())["kid"]
        key = jwt.PyJWKSet.from_dict(jwks)[kid]
        jwt.api_jws.PyJWS().decode_complete(
            f"{header}.{payload}.{sig}", key=key, algorithms=[signature["algorithm"]]
        )

    # And the CLI against the published JWKS URL: 0 valid, 1 tampered.
    path = tmp_path / "manifest.json"
    path.write_bytes(data)
    url = f"{stack.url}/.well-known/jwks.json"
    runner = CliRunner()
    ok = await asyncio.to_thread(runner.invoke, manifest_app, ["verify", str(path), "--jwks", url])
    assert ok.exit_code == 0, ok.output
    path.write_bytes(data.replace(b'"me"', b'"you"'))
    bad = await asyncio.to_thread(runner.invoke, manifest_app, ["verify", str(path), "--jwks", url])
    assert bad.exit_code == 1, bad.output

    _, other = await stack.new_tenant()
    response = await stack.http.get(
        f"{stack.url}/v1/executions/{body['receipt_id']}/manifest", headers=auth(other)
    )
    assert response.status_code == 404
