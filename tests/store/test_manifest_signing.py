"""Run manifests: detached JWS checked by independent code, tamper detection byte by byte,
key rotation, the CLI's exit codes, write-once storage and redaction."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils
from jwt.api_jws import PyJWS
from pydantic import ValidationError
from typer.testing import CliRunner

from schemas.manifest import (
    Approval,
    Artifact,
    ManifestMetadata,
    RunManifest,
    parse_document,
    redact_manifest,
    redacted_tool,
    signing_input,
)
from starter.cli.manifests import check_manifest, manifest_app
from starter.cli.signing_keys import signing_key_app
from store.keyrings.signing import (
    BadSignatureError,
    Keyring,
    MalformedError,
    UnknownKeyError,
    sign_manifest,
    verify_detached,
    verify_manifest,
)
from store.manifests import ManifestExistsError, ManifestStore, manifest_bytes

T0 = datetime(2025, 9, 5, 14, 30, tzinfo=UTC)
SECRETS = ("sk-live-abcdefghijklmnop1234", "hunter2-password", "ghp_abcdefghijklmnopqrstuvwxyz0123")
runner = CliRunner()


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64u_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_manifest(run_id: str = "run_a1b2c3", **changes: Any) -> RunManifest:
    tool = redacted_tool(
        "payment_processor",
        T0,
        {"amount": 99.99, "api_key": SECRETS[0], "headers": {"Authorization": SECRETS[1]}},
        "success",
        data={"transaction_id": "tx_abc123", "echo": SECRETS[2]},
        idempotency_token="pay_idem_xyz",
    )
    fields: dict[str, Any] = dict(
        run_id=run_id,
        tenant_id="tenant-001",
        idempotency_key="process-order-12345",
        trace_id="trace_9f8e",
        correlation_id="req_xyz789",
        inputs_sha="sha256:" + "3b" * 32,
        executed_at=T0,
        attempt=0,
        replayed=False,
        tools=[tool],
        artifacts=[
            Artifact(artifact_id="art_1", type="file", location="s3://a/b.pdf", created_at=T0)
        ],
        outputs={"order_id": "ORD-1", "status": "confirmé", "total": 99.99},
        signatures=[],
        policy_mode="strict",
        approvals=[Approval(approver="ops", approved_at=T0, approval_type="manual")],
        metadata=ManifestMetadata(
            message_id="msg_1", priority=5, submitted_at=T0, replay_reason="none"
        ),
    )
    fields.update(changes)
    return RunManifest(**fields)


@pytest.fixture
def ring(tmp_path: Path) -> Keyring:
    return Keyring.load_or_create(tmp_path / "keys" / "signing-keys.json")


def stored(tmp_path: Path, manifest: RunManifest) -> Path:
    return ManifestStore(tmp_path / "manifests").write(manifest)[0]


def cli_verify(file: Path, jwks: dict[str, Any], tmp_path: Path) -> int:
    jwks_file = tmp_path / "jwks.json"
    if not jwks_file.exists():
        jwks_file.write_text(json.dumps(jwks))
    return runner.invoke(manifest_app, ["verify", str(file), "--jwks", str(jwks_file)]).exit_code


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_sign_and_verify(tmp_path: Path, alg: Any) -> None:
    ring = Keyring.load_or_create(tmp_path / "k.json", alg=alg)
    signed = sign_manifest(make_manifest(), ring)
    (entry,) = signed.signatures
    assert (entry.algorithm, entry.kid, entry.scope) == (alg, ring.active_kid, ["manifest"])
    assert verify_manifest(signed, ring.jwks()) == [ring.active_kid]
    document = parse_document(manifest_bytes(signed))
    assert verify_manifest(document, ring.jwks()) == [ring.active_kid]


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_an_independent_library_verifies_the_signature(tmp_path: Path, alg: Any) -> None:
    """PyJWT knows nothing of Moat: JWKS by kid, payload re-inserted (RFC 7515 App. F)."""
    ring = Keyring.load_or_create(tmp_path / "k.json", alg=alg)
    document = parse_document(manifest_bytes(sign_manifest(make_manifest(), ring)))
    compact = document["signatures"][0]["signature"]
    header_b64, detached, sig_b64 = compact.split(".")
    assert detached == ""
    payload = signing_input({k: v for k, v in document.items() if k != "signatures"})

    key = jwt.PyJWKSet.from_dict(ring.jwks())[ring.active_kid]
    decoded = PyJWS().decode_complete(
        f"{header_b64}.{b64u(payload)}.{sig_b64}", key=key, algorithms=[alg]
    )
    assert decoded["payload"] == payload
    assert decoded["header"] == {"alg": alg, "kid": ring.active_kid}
    with pytest.raises(jwt.InvalidSignatureError):
        PyJWS().decode_complete(
            f"{header_b64}.{b64u(payload + b' ')}.{sig_b64}", key=key, algorithms=[alg]
        )


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_raw_primitives_verify_the_signature_and_kid(tmp_path: Path, alg: Any) -> None:
    """No JOSE library at all: RFC 7638 thumbprint and RFC 7518 signatures by hand."""
    ring = Keyring.load_or_create(tmp_path / "k.json", alg=alg)
    signed = sign_manifest(make_manifest(), ring)
    (jwk,) = ring.jwks()["keys"]
    required = ("crv", "kty", "x", "y") if alg == "ES256" else ("e", "kty", "n")
    members = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"), sort_keys=True)
    assert jwk["kid"] == b64u(hashlib.sha256(members.encode()).digest())
    assert "d" not in jwk and jwk["use"] == "sig"

    header_b64, _, sig_b64 = signed.signatures[0].signature.split(".")
    data = f"{header_b64}.{b64u(signing_input(signed))}".encode()
    sig = b64u_decode(sig_b64)
    if alg == "ES256":
        x, y = (int.from_bytes(b64u_decode(jwk[c])) for c in ("x", "y"))
        point = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
        der = utils.encode_dss_signature(int.from_bytes(sig[:32]), int.from_bytes(sig[32:]))
        point.verify(der, data, ec.ECDSA(hashes.SHA256()))
    else:
        e, n = (int.from_bytes(b64u_decode(jwk[c])) for c in ("e", "n"))
        rsa.RSAPublicNumbers(e, n).public_key().verify(
            sig, data, padding.PKCS1v15(), hashes.SHA256()
        )


def _content(document: dict[str, Any]) -> dict[str, Any]:
    """The document without the unsigned labels of its signature entries."""
    entries = [
        {k: v for k, v in e.items() if k not in ("signer", "signed_at", "scope")}
        if isinstance(e, dict)
        else e
        for e in document.get("signatures", [])
    ]
    return {**document, "signatures": entries}


def test_every_flipped_byte_is_caught(tmp_path: Path, ring: Keyring) -> None:
    """Flip each byte of the stored file: unreadable -> 2, changed content -> 1. Only the
    signature entries' labels (signer, signed_at, scope) are outside what is signed. Every
    byte goes through the CLI's verdict; every 16th through the CLI itself."""
    path = stored(tmp_path, sign_manifest(make_manifest(), ring))
    original, jwks = path.read_bytes(), ring.jwks()
    baseline = _content(parse_document(original))
    assert check_manifest(original, jwks)[0] == cli_verify(path, jwks, tmp_path) == 0
    outcomes: dict[int, int] = {0: 0, 1: 0, 2: 0}
    flipped = tmp_path / "flipped.json"
    for i in range(len(original)):
        data = bytearray(original)
        data[i] ^= 0x01
        try:
            document = parse_document(bytes(data))
            RunManifest.model_validate(document)
        except (ValueError, ValidationError):
            expected = 2
        else:
            expected = 0 if _content(document) == baseline else 1
        code, _ = check_manifest(bytes(data), jwks)
        assert code == expected, (i, bytes(data[max(0, i - 20) : i + 20]))
        if i % 16 == 0:
            flipped.write_bytes(bytes(data))
            assert cli_verify(flipped, jwks, tmp_path) == expected
        outcomes[code] += 1
    assert outcomes[1] > 500 and outcomes[2] > 500
    assert outcomes[0] < 40  # label bytes only


def test_unreadable_files_exit_2(tmp_path: Path, ring: Keyring) -> None:
    path = stored(tmp_path, sign_manifest(make_manifest(), ring))
    bad = tmp_path / "bad.json"
    cases = [path.read_bytes()[:-40], b"", b"\xff\xfe garbage", b"[1, 2]", b'{"a": NaN}']
    for content in [*cases, b'{"run_id": "x", "run_id": "y"}']:
        bad.write_bytes(content)
        assert cli_verify(bad, ring.jwks(), tmp_path) == 2, content
    assert cli_verify(tmp_path / "missing.json", ring.jwks(), tmp_path) == 2
    unsigned = stored(tmp_path, make_manifest(run_id="run_unsigned"))
    assert cli_verify(unsigned, ring.jwks(), tmp_path) == 1


def test_unknown_key_is_rejected(tmp_path: Path, ring: Keyring) -> None:
    other = Keyring.load_or_create(tmp_path / "other.json")
    signed = sign_manifest(make_manifest(), ring)
    with pytest.raises(UnknownKeyError):
        verify_manifest(signed, other.jwks())
    assert cli_verify(stored(tmp_path, signed), other.jwks(), tmp_path) == 1


def test_rotation_keeps_old_manifests_valid(tmp_path: Path, ring: Keyring) -> None:
    old = sign_manifest(make_manifest("run_old"), ring)
    old_kid = ring.active_kid
    new_kid = Keyring.load(ring.path).rotate("RS256")
    reloaded = Keyring.load(ring.path)
    assert reloaded.active_kid == new_kid != old_kid
    assert [k["kid"] for k in reloaded.jwks()["keys"]] == [new_kid, old_kid]
    new = sign_manifest(make_manifest("run_new"), reloaded)
    assert verify_manifest(old, reloaded.jwks()) == [old_kid]
    assert verify_manifest(new, reloaded.jwks()) == [new_kid]
    assert stat.S_IMODE(os.stat(ring.path).st_mode) == 0o600


def test_concurrent_first_use_creates_one_keyring(tmp_path: Path) -> None:
    """Gateway and workers start together: they must all end up with the same key."""
    path = tmp_path / "signing-keys.json"
    with ThreadPoolExecutor(8) as pool:
        rings = list(pool.map(lambda _: Keyring.load_or_create(path), range(8)))
    assert len({r.active_kid for r in rings}) == 1
    assert len(Keyring.load(path).keys) == 1


def test_cli_keys_and_default_keyring(tmp_path: Path) -> None:
    env = {"MOAT_HOME": str(tmp_path / "home")}
    assert runner.invoke(signing_key_app, ["list"], env=env).exit_code == 2
    assert runner.invoke(signing_key_app, ["rotate"], env=env).exit_code == 0
    ring = Keyring.load(tmp_path / "home" / "signing-keys.json")
    path = stored(tmp_path, sign_manifest(make_manifest(), ring))
    assert runner.invoke(signing_key_app, ["rotate", "--alg", "RS256"], env=env).exit_code == 0
    listing = runner.invoke(signing_key_app, ["list"], env=env)
    assert listing.exit_code == 0 and ring.active_kid in listing.output
    assert runner.invoke(manifest_app, ["verify", str(path)], env=env).exit_code == 0
    shown = runner.invoke(manifest_app, ["inspect", str(path)], env=env)
    assert shown.exit_code == 0 and "UNVERIFIED" in shown.output
    assert ring.active_kid in shown.output and "sha256:" in shown.output


@pytest.fixture
def jwks_url(ring: Keyring) -> Iterator[str]:
    body = json.dumps(ring.jwks()).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/.well-known/jwks.json" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_cli_fetches_the_jwks_from_a_url(tmp_path: Path, ring: Keyring, jwks_url: str) -> None:
    path = stored(tmp_path, sign_manifest(make_manifest(), ring))
    ok = runner.invoke(
        manifest_app, ["verify", str(path), "--jwks", jwks_url + "/.well-known/jwks.json"]
    )
    assert ok.exit_code == 0, ok.output
    missing = runner.invoke(manifest_app, ["verify", str(path), "--jwks", jwks_url + "/nope"])
    assert missing.exit_code == 2


def test_detached_jws_edge_cases(ring: Keyring) -> None:
    compact = ring.sign_detached(b"payload")
    assert verify_detached(compact, b"payload", ring.jwks()) == ring.active_kid
    with pytest.raises(BadSignatureError):
        verify_detached(compact, b"payloaD", ring.jwks())
    header, _, sig = compact.split(".")
    attached = f"{header}.{b64u(b'other')}.{sig}"  # an embedded payload is never trusted
    none_header = b64u(json.dumps({"alg": "none", "kid": ring.active_kid}).encode())
    b64_false = b64u(json.dumps({"alg": "ES256", "kid": ring.active_kid, "b64": False}).encode())
    for bad in (attached, f"{none_header}..", f"{b64_false}..{sig}", "x..y", compact + "."):
        with pytest.raises(MalformedError):
            verify_detached(bad, b"payload", ring.jwks())
    with pytest.raises(MalformedError):
        verify_detached(compact, b"payload", {"nokeys": []})


def test_signature_entry_must_match_its_header(tmp_path: Path, ring: Keyring) -> None:
    signed = sign_manifest(make_manifest(), ring)
    entry = signed.signatures[0]
    lying = signed.model_copy(update={"signatures": [entry.model_copy(update={"kid": "x"})]})
    with pytest.raises(BadSignatureError):
        verify_manifest(lying, ring.jwks())


def test_write_once(tmp_path: Path, ring: Keyring) -> None:
    store = ManifestStore(tmp_path / "m")
    first = sign_manifest(make_manifest(), ring)
    path, digest = store.write(first)
    assert path == tmp_path / "m" / "tenant-001" / "run_a1b2c3" / "manifest.json"
    assert digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(ManifestExistsError):
        store.write(first)
    assert store.write_or_get(first) == (path, digest)
    resigned = sign_manifest(make_manifest(), ring)  # a retried activity: new ECDSA signature
    assert store.write_or_get(resigned) == (path, digest)
    with pytest.raises(ManifestExistsError):
        store.write_or_get(sign_manifest(make_manifest(attempt=1), ring))
    assert store.read("tenant-001", "run_a1b2c3") == path.read_bytes()
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]
    assert store.delete("tenant-001", "run_a1b2c3") and not path.parent.exists()


def test_a_staged_manifest_is_seen_only_once_published(tmp_path: Path, ring: Keyring) -> None:
    """``stage`` makes the bytes durable out of readers' sight; ``publish`` links them into
    place write-once; ``discard`` leaves nothing behind."""
    store = ManifestStore(tmp_path / "m")
    manifest = sign_manifest(make_manifest(), ring)
    staged = store.stage(manifest)
    assert staged.tmp.read_bytes() == manifest_bytes(manifest)
    assert not store.exists("tenant-001", "run_a1b2c3")
    store.discard(staged)
    assert list(staged.path.parent.iterdir()) == []  # discarded: no file, no temporary
    path, digest = store.publish(store.stage(manifest))
    assert store.read("tenant-001", "run_a1b2c3") == manifest_bytes(manifest)
    assert digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    late = store.stage(sign_manifest(make_manifest(attempt=1), ring))
    with pytest.raises(ManifestExistsError):
        store.publish(late)  # write-once, whenever it was staged
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]
    assert store.read("tenant-001", "run_a1b2c3") == manifest_bytes(manifest)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which a plain mkdir or open makes world-readable
    entries: the modes below must come from the store, not from the umask."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("open_umask")
def test_manifests_are_readable_by_their_owner_only(tmp_path: Path, ring: Keyring) -> None:
    root = tmp_path / "home" / "manifests"
    path, _ = ManifestStore(root).write(sign_manifest(make_manifest(), ring))
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700  # the run's folder
    assert _mode(path.parent.parent) == 0o700  # the tenant's
    assert _mode(root) == 0o700  # created by the store


@pytest.mark.usefixtures("open_umask")
def test_an_existing_root_is_kept_and_older_open_folders_are_closed(
    tmp_path: Path, ring: Keyring
) -> None:
    root = tmp_path / "shared"
    root.mkdir(mode=0o750)
    (root / "tenant-001").mkdir(mode=0o755)  # made by an earlier version
    path, _ = ManifestStore(root).write(sign_manifest(make_manifest(), ring))
    assert _mode(root) == 0o750  # the operator's folder, as the operator set it up
    assert _mode(path.parent.parent) == 0o700
    assert _mode(path.parent) == 0o700
    assert _mode(path) == 0o600


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "a\x00b", "a\\b", " a"])
def test_path_traversal_is_rejected(tmp_path: Path, bad: str) -> None:
    store = ManifestStore(tmp_path)
    with pytest.raises(ValueError):
        store.path_for(bad, "run_1")
    with pytest.raises(ValueError):
        store.path_for("tenant-001", bad)


def test_no_secret_reaches_the_manifest(tmp_path: Path, ring: Keyring) -> None:
    data = manifest_bytes(sign_manifest(make_manifest(), ring))
    for secret in SECRETS:
        assert secret.encode() not in data
    assert b"pay_idem_xyz" in data and b"tx_abc123" in data


def test_redact_manifest_covers_free_form_values() -> None:
    failed = redacted_tool("api", T0, {}, "failure", error=f"refused: {SECRETS[2]}")
    assert failed.result.error == "[REDACTED]"
    raw = make_manifest(
        outputs={"session_token": "abc", "note": SECRETS[0]},
        artifacts=[
            Artifact(
                artifact_id="a",
                type="api_response",
                location="https://user:pw@example.test/x",
                created_at=T0,
                metadata={"password": "pw"},
            )
        ],
    )
    text = redact_manifest(raw).model_dump_json()
    assert SECRETS[0] not in text and "user:pw" not in text and '"pw"' not in text
    assert "process-order-12345" in text


def test_seed_shaped_documents_parse() -> None:
    """The manifest format's failed-run example: unsigned, metadata extras, absent optionals."""
    seed = make_manifest(signatures=[]).model_dump(mode="json")
    seed["metadata"] = {
        "message_id": "msg_fail_xyz",
        "priority": 3,
        "submitted_at": "2025-09-05T15:59:30.000Z",
        "failure_classification": "transient_network",
        "dlq_entry": True,
    }
    model = RunManifest.model_validate(seed)
    dumped = model.model_dump(mode="json")
    assert dumped["metadata"]["dlq_entry"] is True
    assert "execution_duration_ms" not in dumped["metadata"]
    with pytest.raises(BadSignatureError):
        verify_manifest(model, {"keys": []})
