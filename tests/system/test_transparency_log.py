"""The transparency log end to end, on the real stack: executions, checkpoints, an export
that ``moat evidence verify`` and the independent verifier (written from the docs alone)
both accept; then each tampering is caught by both (a manifest file deleted, a receipt row
edited by the database owner, a second tree signed with the same log key), and a witness
refuses an inconsistent checkpoint but cosigns a consistent one."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from schemas import translog
from starter.cli import app as cli
from starter.service import translog as translog_service
from store import api_keys
from store.manifests import ManifestStore
from store.models import ManifestRow, ReceiptRow
from tests.evidence.independent_verifier import verify_bundle as independent
from tests.support.stack import STACK_KEY_SCOPES, Stack

runner = CliRunner()
LOG_SCOPES = (*STACK_KEY_SCOPES, "log:read", "log:cosign")


@dataclass
class Log:
    stack: Stack
    key: str
    vkey: str


@pytest.fixture
async def log(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Log:
    async with stack.sessions.begin() as session:
        key = await api_keys.create_api_key(session, stack.tenant_id, scopes=LOG_SCOPES)
    for name, value in {
        "MOAT_GATEWAY_URL": stack.url,
        "MOAT_API_KEY": key,
        "MOAT_DATABASE_URL": stack.settings.database_url or "",
        "MOAT_HOME": str(stack.settings.home),
        "COLUMNS": "200",
    }.items():
        monkeypatch.setenv(name, value)
    vkey = (await _get(stack, key, "/v1/log/key")).text.strip()
    return Log(stack, key, vkey)


async def _invoke(args: list[str]) -> Result:
    # The CLI blocks; the gateway answers on this test's loop, so it runs in a thread.
    return await asyncio.to_thread(runner.invoke, cli, args)


async def _get(stack: Stack, key: str, path: str, **params: int) -> httpx.Response:
    answer = await stack.http.get(
        stack.url + path, params=params, headers={"Authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 200, answer.text
    return answer


async def _run(log: Log, n: int) -> None:
    for i in range(n):
        answer = await log.stack.execute("demo.echo", {"log": i}, key=uuid.uuid4().hex)
        assert answer.status_code == 200, answer.text


async def _checkpoint(log: Log) -> int:
    stack = log.stack
    made = await translog_service.checkpoint_now(stack.sessions, stack.settings, [stack.tenant_id])
    assert made.checkpoints == 1, made
    note = (await _get(log.stack, log.key, "/v1/log/checkpoint")).text
    return _checkpoint_of(note).size


def _checkpoint_of(note: str) -> translog.Checkpoint:
    return translog.parse_checkpoint(translog.split_note(note)[0])


async def _fork(log: Log, real: str, entries: list[dict[str, object]]) -> str:
    """A checkpoint of ``real``'s size over other leaves (the first one changed), signed
    with the same log key: the tree a log keeping two histories shows someone else."""
    checkpoint = _checkpoint_of(real)
    leaves = [bytes.fromhex(str(e["leaf"])) for e in entries[: checkpoint.size]]
    leaves[0] = hashlib.sha256(b"another history").digest()
    root = translog.root_of([translog.leaf_hash(leaf) for leaf in leaves])
    body = translog.checkpoint_body(translog.Checkpoint(checkpoint.origin, checkpoint.size, root))
    return translog.sign_note(body, checkpoint.origin, await _log_key(log))


async def _export(since: int | str, out: Path, *extra: str) -> None:
    done = await _invoke(["evidence", "export", "--since", str(since), str(out), *extra])
    assert done.exit_code == 0, done.output


async def _verify(bundle: Path, *extra: str) -> Result:
    return await _invoke(["evidence", "verify", str(bundle), *extra])


def _entries(bundle: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (bundle / "entries.jsonl").read_text().splitlines()]


async def test_export_verifies_and_each_tampering_is_detected(log: Log, tmp_path: Path) -> None:
    await _run(log, 2)
    earlier = await _checkpoint(log)
    await _run(log, 1)
    size = await _checkpoint(log)
    assert 0 < earlier < size

    whole, recent = tmp_path / "whole", tmp_path / "recent"
    await _export(0, whole)
    await _export(earlier, recent)
    assert [e["index"] for e in _entries(whole)] == list(range(size))
    since_then = tmp_path / "since-then"
    await _export("2000-01-01T00:00:00Z", since_then)
    assert _entries(since_then) == _entries(whole)
    assert (recent / "consistency.json").exists()
    for bundle in (whole, recent):
        verified = await _verify(bundle)
        assert verified.exit_code == 0, verified.output
        assert "bundle verified" in verified.stdout
        assert independent(bundle) == []

    # (c) A second tree of the earlier size, signed with the same log key: not consistent.
    real = (await _get(log.stack, log.key, f"/v1/log/checkpoints/{earlier}")).text
    forked = tmp_path / "forked.checkpoint"
    forked.write_text(await _fork(log, real, _entries(whole)))
    (tmp_path / "real.checkpoint").write_text(real)
    assert (await _verify(recent, "--checkpoint", str(tmp_path / "real.checkpoint"))).exit_code == 0
    for bundle in (whole, recent):
        split = await _verify(bundle, "--checkpoint", str(forked))
        assert split.exit_code == 1, split.output
        said = f"consistency: checkpoint of size {earlier} is not consistent with size {size}"
        assert said in split.stdout
        assert any("not consistent" in p for p in independent(bundle, (), 0, forked.read_text()))
    # The log's own proof shows the real checkpoint extends to the latest, the fork not.
    route = "/v1/log/proof/consistency"
    proof = (await _get(log.stack, log.key, route, **{"from": earlier, "to": size})).json()
    hashes = [translog.from_hex(h) for h in proof["proof"]]
    new_root = _checkpoint_of((whole / "checkpoint").read_text()).root
    for note, holds in ((real, True), (forked.read_text(), False)):
        old_root = _checkpoint_of(note).root
        assert translog.verify_consistency(earlier, size, hashes, old_root, new_root) is holds

    # (a) A manifest file deleted from the store; (b) a receipt row edited by the owner.
    manifest = next(e for e in _entries(whole) if e["kind"] == "manifest")
    receipt = next(e for e in _entries(whole) if e["kind"] == "receipt")
    async with log.stack.sessions.begin() as session:
        row = await session.scalar(select(ManifestRow).where(ManifestRow.id == manifest["id"]))
        assert row is not None
        # The owner gets past the write-once trigger, as an attacker with it would.
        await session.execute(text("SET LOCAL session_replication_role = replica"))
        await session.execute(
            update(ReceiptRow).where(ReceiptRow.id == receipt["id"]).values(latency_ms=987654)
        )
    ManifestStore(log.stack.settings.manifests_dir).path_for(row.tenant_id, row.run_id).unlink()
    tampered = tmp_path / "tampered"
    await _export(0, tampered)
    caught = await _verify(tampered)
    assert caught.exit_code == 1, caught.output
    deleted = f"manifest {manifest['id']} (leaf {manifest['index']}): object missing"
    edited = f"receipt {receipt['id']} (leaf {receipt['index']}): digest does not match the log"
    assert deleted in caught.stdout and edited in caught.stdout
    assert "evidence_rejected" in caught.stderr
    problems = independent(tampered)
    assert any(p.startswith(deleted) for p in problems), problems
    assert edited in problems


async def test_a_witness_refuses_a_fork_and_cosigns_an_extension(log: Log, tmp_path: Path) -> None:
    keyfile, state = tmp_path / "witness.key", tmp_path / "witness.state"
    made = await _invoke(["witness", "keygen", "--name", "auditor-1", "--out", str(keyfile)])
    assert made.exit_code == 0, made.output
    witness_vkey = made.stdout.strip()
    run = ["witness", "--url", log.stack.url, "--api-key", log.key, "--log-vkey", log.vkey]
    run += ["--key", str(keyfile), "--state", str(state), "--once"]

    await _run(log, 1)
    first = await _checkpoint(log)
    cosigned = await _invoke(run)
    assert cosigned.exit_code == 0, cosigned.output
    assert f"size {first}: cosigned as auditor-1" in cosigned.stdout
    good_state = state.read_bytes()

    # The witness remembers a checkpoint of that size with another root: the log's next
    # checkpoint does not extend it, so it refuses, posts nothing and keeps its state.
    await _run(log, 1)
    second = await _checkpoint(log)
    remembered = json.loads(good_state)
    origin = log.vkey.split("+")[0]
    entry = remembered["origins"][origin]
    other_root = base64.b64encode(hashlib.sha256(b"fork").digest()).decode()
    entry["checkpoint"] = entry["checkpoint"].replace(entry["root"], other_root)
    state.write_text(json.dumps(remembered))
    forked_state = state.read_bytes()
    refused = await _invoke(run)
    assert refused.exit_code == 1, refused.output
    assert "error: log_inconsistent:" in refused.stderr
    assert f"size {second} is not consistent with the one of size {first}" in refused.stderr
    assert state.read_bytes() == forked_state
    note = (await _get(log.stack, log.key, "/v1/log/checkpoint")).text
    assert "auditor-1" not in note

    # A checkpoint whose log signature does not verify with the log key it was given.
    stranger = translog.make_vkey(origin, Ed25519PrivateKey.generate().public_key())
    unsigned = await _invoke(_with(run, "--log-vkey", stranger))
    assert unsigned.exit_code == 1 and "error: log_signature_invalid:" in unsigned.stderr
    assert state.read_bytes() == forked_state

    # With its true state it cosigns the consistent checkpoint: served, and verified.
    state.write_bytes(good_state)
    cosigned = await _invoke(run)
    assert cosigned.exit_code == 0, cosigned.output
    note = (await _get(log.stack, log.key, "/v1/log/checkpoint")).text
    assert "\u2014 auditor-1 " in note
    assert json.loads(state.read_text())["origins"][origin]["size"] == second
    bundle = tmp_path / "bundle"
    await _export(first, bundle, "--witness", witness_vkey)
    assert (bundle / "witnesses" / "auditor-1.vkey").read_text().strip() == witness_vkey
    trusted = await _verify(bundle, "--witness", witness_vkey, "--min-witnesses", "1")
    assert trusted.exit_code == 0, trusted.output
    assert "auditor-1" in trusted.stdout
    assert independent(bundle, [witness_vkey], 1) == []
    assert (await _verify(bundle, "--min-witnesses", "1")).exit_code == 0  # the bundle's keys
    other = translog.make_vkey(
        "auditor-2", Ed25519PrivateKey.generate().public_key(), translog.ALG_COSIGNATURE_V1
    )
    untrusted = await _verify(bundle, "--witness", other, "--min-witnesses", "1")
    assert untrusted.exit_code == 1
    assert "checkpoint: no valid cosignature of witness auditor-2" in untrusted.stdout
    assert "witnesses: 0 of 1 required cosignatures verify" in untrusted.stdout


def _with(args: list[str], option: str, value: str) -> list[str]:
    at = args.index(option)
    return [*args[: at + 1], value, *args[at + 2 :]]


async def _log_key(log: Log) -> Ed25519PrivateKey:
    """The deployment's log key, as the worker and `moat log checkpoint` load it."""
    from store.keyrings.log import signing_key

    return signing_key(log.stack.settings)
