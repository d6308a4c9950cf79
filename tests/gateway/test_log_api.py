"""The transparency log over HTTP: every execution logs its receipt and its manifest in the
transactions that record them; checkpoints, proofs and the manifest's proof served by the
gateway verify with ``schemas.translog`` alone; a witness's cosignature is kept only when
it verifies; another tenant's key reads nothing of this log."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text
from typer.testing import CliRunner

from schemas import translog as t
from schemas.checkpoints import LogCheckpointInput, LogCheckpointReport
from schemas.names import LOG_CHECKPOINT_WORKFLOW
from starter.cli import app
from starter.runtime.schedules import ensure_log_checkpoint_schedule
from starter.service import translog as log_service
from store import api_keys, receipts, tenancy
from store import translog as log_store
from tests.plans.support import post_plan
from tests.support.stack import STACK_KEY_SCOPES, Stack

READER = (*STACK_KEY_SCOPES, "log:read", "log:cosign")


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def reader_key(stack: Stack, tenant_id: str, scopes: tuple[str, ...] = READER) -> str:
    async with stack.sessions.begin() as session:
        return await api_keys.create_api_key(session, tenant_id, scopes=list(scopes))


async def get(stack: Stack, path: str, key: str, **params: object):
    return await stack.http.get(f"{stack.url}{path}", headers=auth(key), params=params)


async def checkpoint(stack: Stack) -> None:
    await log_service.checkpoint_now(stack.sessions, stack.settings, [stack.tenant_id])


async def checkpoint_by_cli(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """``moat log checkpoint --tenant``, as an operator runs it."""
    monkeypatch.setenv("MOAT_DATABASE_URL", stack.settings.database_url or "")
    monkeypatch.setenv("MOAT_HOME", str(stack.settings.home))
    args = ["log", "checkpoint", "--tenant", stack.tenant_id, "--json"]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    report: dict[str, int] = json.loads(result.output)
    return report


async def test_executions_are_logged_checkpointed_and_proved(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await reader_key(stack, stack.tenant_id)
    first = (await stack.execute("demo.echo", {"log": 1}, key="log-1")).json()
    rid = first["receipt_id"]
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        receipt = await receipts.get_receipt(session, stack.tenant_id, rid)
        assert receipt is not None
        logged = await log_store.leaf_of(session, stack.tenant_id, "receipt", rid)
        assert logged is not None and logged.index is None
        # The leaf is the receipt as stored, read back: its RFC 8785 bytes' SHA-256.
        assert logged.digest == hashlib.sha256(log_store.receipt_bytes(receipt)).digest()
        for table, kind in (("receipts", "receipt"), ("manifests", "manifest")):
            unlogged = await session.execute(
                text(
                    f"SELECT count(*), count(l.ref_id) FROM {table} r LEFT JOIN log_leaves l "
                    "ON l.tenant_id = r.tenant_id AND l.kind = :k AND l.ref_id = r.id "
                    "WHERE r.tenant_id = :t"
                ),
                {"t": stack.tenant_id, "k": kind},
            )
            assert tuple(unlogged.one()) == (1, 1)
    pending = await get(stack, f"/v1/executions/{rid}/manifest/proof", key)
    assert pending.status_code == 409
    assert pending.json()["error"]["code"] == "log_leaf_not_checkpointed"
    assert (await get(stack, "/v1/log/checkpoint", key)).status_code == 404

    await checkpoint(stack)
    vkey = (await get(stack, "/v1/log/key", key)).text.strip()
    verifier = t.parse_vkey(vkey)
    assert verifier.name == f"moat.local/log/{stack.tenant_id}"
    note = (await get(stack, "/v1/log/checkpoint", key)).text
    cp = t.parse_checkpoint(t.verify_note(note, verifier))
    assert cp.size == 2 and cp.origin == verifier.name
    manifest_bytes = (await get(stack, f"/v1/executions/{rid}/manifest", key)).content
    leaves = (await get(stack, "/v1/log/leaves", key, start=0, end=2)).json()
    assert sorted(e["kind"] for e in leaves) == ["manifest", "receipt"]
    by_kind = {e["kind"]: e for e in leaves}
    assert by_kind["manifest"]["leaf"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert by_kind["receipt"]["id"] == rid

    proved = (await get(stack, f"/v1/executions/{rid}/manifest/proof", key)).json()
    assert proved["leaf"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert proved["checkpoint"] == note and proved["tree_size"] == 2
    leaf = t.leaf_hash(bytes.fromhex(proved["leaf"]))
    path = [bytes.fromhex(p) for p in proved["proof"]]
    assert t.verify_inclusion(leaf, proved["leaf_index"], 2, path, cp.root)

    second = (await stack.execute("demo.echo", {"log": 2}, key="log-2")).json()
    assert await checkpoint_by_cli(stack, monkeypatch) == {
        "tenants": 1,
        "sequenced": 2,
        "checkpoints": 1,
    }
    newer = (await get(stack, "/v1/log/checkpoint", key)).text
    cp4 = t.parse_checkpoint(t.verify_note(newer, verifier))
    assert cp4.size == 4
    assert (await get(stack, "/v1/log/checkpoints/2", key)).text == note
    consistent = (await get(stack, "/v1/log/proof/consistency", key, **{"from": 2, "to": 4})).json()
    proof = [bytes.fromhex(p) for p in consistent["proof"]]
    assert (consistent["from"], consistent["to"]) == (2, 4)
    assert t.verify_consistency(2, 4, proof, cp.root, cp4.root)
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        second_leaf = await log_store.leaf_of(
            session, stack.tenant_id, "receipt", second["receipt_id"]
        )
    assert second_leaf is not None
    included = (
        await get(stack, "/v1/log/proof/inclusion", key, leaf=second_leaf.digest.hex(), size=4)
    ).json()
    path = [bytes.fromhex(p) for p in included["proof"]]
    assert t.verify_inclusion(
        t.leaf_hash(second_leaf.digest), included["leaf_index"], 4, path, cp4.root
    )
    too_big = await get(stack, "/v1/log/proof/consistency", key, **{"from": 2, "to": 5})
    assert too_big.json()["error"]["code"] == "log_size_not_found"
    backwards = await get(stack, "/v1/log/proof/consistency", key, **{"from": 4, "to": 2})
    assert backwards.json()["error"]["code"] == "log_size_invalid"

    # A witness cosigns; its line is served after the log's signature.
    witness = Ed25519PrivateKey.generate()
    wkey = t.make_vkey("witness.test/w1", witness.public_key(), t.ALG_COSIGNATURE_V1)
    body = t.split_note(newer)[0]
    line = t.cosign(body, "witness.test/w1", witness, int(time.time()))
    forged = t.cosign(t.split_note(note)[0], "witness.test/w1", witness, int(time.time()))
    refused = await stack.http.post(
        f"{stack.url}/v1/log/cosignatures",
        json={"size": 4, "line": forged, "vkey": wkey},
        headers=auth(key),
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "log_cosignature_invalid"
    added = await stack.http.post(
        f"{stack.url}/v1/log/cosignatures",
        json={"size": 4, "line": line, "vkey": wkey},
        headers=auth(key),
    )
    assert added.status_code == 201, added.text
    cosigned = (await get(stack, "/v1/log/checkpoint", key)).text
    assert cosigned == newer + line
    assert len(t.cosignatures_by(cosigned, t.parse_vkey(wkey))) == 1

    # Another tenant's key: its own (empty) log, nothing of this one.
    other_tenant, _ = await stack.new_tenant()
    other = await reader_key(stack, other_tenant)
    assert (await get(stack, "/v1/log/checkpoint", other)).status_code == 404
    assert (await get(stack, f"/v1/executions/{rid}/manifest/proof", other)).status_code == 404
    leaked = await get(stack, "/v1/log/proof/inclusion", other, leaf=proved["leaf"], size=2)
    assert leaked.json()["error"]["code"] == "log_size_not_found"
    assert t.parse_vkey((await get(stack, "/v1/log/key", other)).text).name.endswith(other_tenant)
    # A key without the log's read scope.
    assert (await get(stack, "/v1/log/checkpoint", stack.api_key)).status_code == 403


async def test_checkpoint_workflow_and_schedule(stack: Stack) -> None:
    await stack.execute("demo.echo", {"log": "wf"}, key="log-wf")
    # A plan of one step: the step's receipt and manifest, and the plan's own manifest.
    plan = {"steps": [{"id": "a", "capability_id": "demo.echo", "input": {"n": 1}}]}
    planned = await post_plan(stack, plan, key="log-plan")
    assert planned.json()["status"] == "executed", planned.text
    async with tenancy.tenant_transaction(stack.sessions, stack.tenant_id) as session:
        for table, kind, rows in (("receipts", "receipt", 2), ("manifests", "manifest", 3)):
            counted = await session.execute(
                text(
                    f"SELECT count(*), count(l.ref_id) FROM {table} r LEFT JOIN log_leaves l "
                    "ON l.tenant_id = r.tenant_id AND l.kind = :k AND l.ref_id = r.id "
                    "WHERE r.tenant_id = :t"
                ),
                {"t": stack.tenant_id, "k": kind},
            )
            assert tuple(counted.one()) == (rows, rows)
    report = await stack.client.execute_workflow(
        LOG_CHECKPOINT_WORKFLOW,
        LogCheckpointInput(tenant_id=stack.tenant_id),
        id=f"log-checkpoint-{stack.tenant_id}",
        task_queue=stack.settings.task_queue,
        result_type=LogCheckpointReport,
    )
    assert (report.tenants, report.sequenced, report.checkpoints) == (1, 5, 1)
    schedule_id = await ensure_log_checkpoint_schedule(stack.client, stack.settings)
    assert await ensure_log_checkpoint_schedule(stack.client, stack.settings) == schedule_id
    await stack.client.get_schedule_handle(schedule_id).delete()
