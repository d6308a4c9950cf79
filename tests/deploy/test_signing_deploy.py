"""Signing keys as deployed: workers sign with a keyring they are given and never mint one of
their own; gateways serve the public JWK Set written at rotation, never the private keyring."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

import worker as worker_module
from schemas.settings import MoatSettings
from starter.cli.manifests import manifest_app
from starter.cli.signing_keys import signing_key_app
from starter.devstack import free_port
from store.keyrings.signing import Keyring, PublishedJwks, sign_manifest, verify_manifest
from store.manifests import ManifestStore
from tests.store.test_manifest_signing import make_manifest
from tests.support.stack import StackFactory, repo_root

runner = CliRunner()
PUBLIC_MEMBERS = {"kty", "crv", "x", "y", "n", "e", "kid", "alg", "use"}


def jwks_url(url: str) -> str:
    return f"{url}/.well-known/jwks.json"


async def test_worker_never_creates_a_configured_keyring(
    base_settings: MoatSettings, temporal: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A worker whose mounted keyring is missing stops with what to do, instead of signing
    with a key of its own that no gateway publishes."""
    mounted = tmp_path / "not-mounted" / "signing-keys.json"
    settings = base_settings.model_copy(update={"signing_keyring": mounted})
    async with worker_module.activity_deps(settings) as (sessions, http):
        with pytest.raises(FileNotFoundError, match=r"MOAT_SIGNING_KEYRING.*moat keys rotate"):
            worker_module.build_worker(temporal.client, settings, sessions, http)
    assert not mounted.parent.exists()


def test_moat_worker_names_the_missing_keyring_without_a_traceback(tmp_path: Path) -> None:
    """Checked before anything else: no Temporal or PostgreSQL is needed to be told."""
    mounted = tmp_path / "not-mounted" / "signing-keys.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOAT_")}
    closed = f"127.0.0.1:{free_port()}"
    env.update(MOAT_SIGNING_KEYRING=str(mounted), MOAT_TEMPORAL_ADDRESS=closed)
    done = subprocess.run(
        [sys.executable, "-m", "starter.cli", "worker"],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "MOAT_SIGNING_KEYRING" in done.stderr and "moat keys rotate" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not mounted.parent.exists()


async def test_worker_signs_with_a_read_only_keyring(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """The provided keyring is only read: nothing (lock file, public set) appears beside it,
    as on a read-only secret mount."""
    keyring = Keyring.load_or_create(tmp_path / "operator" / "signing-keys.json")
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "signing-keys.json").write_bytes(keyring.path.read_bytes())
    async with make_stack(signing_keyring=mounted / "signing-keys.json") as stack:
        body = (await stack.execute("demo.echo", {"signed": "by the mount"})).json()
        assert body["status"] == "executed", body
        data = ManifestStore(stack.settings.manifests_dir).read(stack.tenant_id, body["run_id"])
    assert verify_manifest(json.loads(data), keyring.jwks()) == [keyring.active_kid]
    assert sorted(p.name for p in mounted.iterdir()) == ["signing-keys.json"]


async def test_gateway_serves_the_published_jwks_without_the_private_keyring(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """The gateway is given the public file only (its keyring path names nothing); an
    operator's rotation rewrites that file, and the gateway serves the new set with the old
    key still listed, against which every manifest verifies."""
    keyring_path = tmp_path / "operator" / "signing-keys.json"
    public = tmp_path / "public" / "jwks.json"
    env = {"MOAT_SIGNING_KEYRING": str(keyring_path), "MOAT_JWKS_PATH": str(public)}
    assert runner.invoke(signing_key_app, ["rotate"], env=env).exit_code == 0
    first = Keyring.load(keyring_path)
    old = sign_manifest(make_manifest("run_old"), first)

    absent = tmp_path / "no-private-keys-here" / "signing-keys.json"
    overrides: dict[str, Any] = {"jwks_path": public, "signing_keyring": absent}
    async with make_stack(with_worker=False, **overrides) as stack:
        served = (await stack.http.get(jwks_url(stack.url))).json()
        assert [k["kid"] for k in served["keys"]] == [first.active_kid]
        assert all(set(k) <= PUBLIC_MEMBERS for k in served["keys"])
        assert verify_manifest(old, served) == [first.active_kid]

        rotated = runner.invoke(signing_key_app, ["rotate", "--alg", "RS256"], env=env)
        assert rotated.exit_code == 0, rotated.output
        second = Keyring.load(keyring_path)
        new = sign_manifest(make_manifest("run_new"), second)
        served = (await stack.http.get(jwks_url(stack.url))).json()
        assert [k["kid"] for k in served["keys"]] == [second.active_kid, first.active_kid]
        assert all(set(k) <= PUBLIC_MEMBERS for k in served["keys"])
        assert verify_manifest(old, served) == [first.active_kid]
        assert verify_manifest(new, served) == [second.active_kid]
        manifest_file = ManifestStore(tmp_path / "manifests").write(new)[0]
        verify = ["verify", str(manifest_file), "--jwks", jwks_url(stack.url)]
        # In a thread: the CLI's synchronous request needs this loop to serve it.
        verified = await asyncio.to_thread(runner.invoke, manifest_app, verify)
        assert verified.exit_code == 0, verified.output
    assert not absent.parent.exists()


@pytest.mark.parametrize("mistake", ["private keyring", "missing file"])
async def test_gateway_never_serves_private_keys_nor_an_empty_set_by_mistake(
    make_stack: StackFactory, tmp_path: Path, mistake: str
) -> None:
    """A private keyring given as the JWKS file is refused, never served; a configured file
    that is missing is an error, not an empty set that makes every manifest look forged."""
    ring = Keyring.load_or_create(tmp_path / "signing-keys.json")
    path = ring.path if mistake == "private keyring" else tmp_path / "unpublished" / "jwks.json"
    async with make_stack(with_worker=False, jwks_path=path) as stack:
        response = await stack.http.get(jwks_url(stack.url))
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "jwks_unavailable"
    assert "moat keys publish" in response.json()["error"]["message"]
    assert '"d"' not in response.text and ring.jwks()["keys"][0]["x"] not in response.text


async def test_development_keyring_is_created_with_its_public_set(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """Unconfigured (``moat up``), the first worker creates the keyring under MOAT_HOME and
    the public set beside it, which the gateway serves."""
    home = tmp_path / "home"
    async with make_stack(home=home) as stack:
        assert (home / "signing-keys.json").exists() and (home / "jwks.json").exists()
        served = (await stack.http.get(jwks_url(stack.url))).json()
    ring = Keyring.load(home / "signing-keys.json")
    assert served == ring.jwks()


def test_publish_writes_the_public_set_of_an_existing_keyring(tmp_path: Path) -> None:
    """A keyring made before the public file existed gets one without a rotation."""
    keyring_path = tmp_path / "signing-keys.json"
    ring = Keyring.load_or_create(keyring_path)
    public = tmp_path / "public" / "jwks.json"
    env = {"MOAT_SIGNING_KEYRING": str(keyring_path), "MOAT_JWKS_PATH": str(public)}
    result = runner.invoke(signing_key_app, ["publish"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(public.read_text()) == ring.jwks()
    assert Keyring.load(keyring_path).active_kid == ring.active_kid
    missing = {**env, "MOAT_SIGNING_KEYRING": str(tmp_path / "none.json")}
    assert runner.invoke(signing_key_app, ["publish"], env=missing).exit_code == 2


def test_published_jwks_is_parsed_again_only_when_the_file_changes(tmp_path: Path) -> None:
    ring = Keyring.load_or_create(tmp_path / "k.json", jwks_path=tmp_path / "jwks.json")
    published = PublishedJwks(tmp_path / "jwks.json")
    first = published.current()
    assert published.current() is first
    ring.rotate()
    second = published.current()
    assert second is not first
    assert [k["kid"] for k in second["keys"]] == [k.kid for k in reversed(ring.keys)]
