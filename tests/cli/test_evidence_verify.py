"""``moat evidence verify`` on bundles built here from the format alone (no stack): what
passes, and the one line each problem is said in."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from schemas import translog
from starter.cli import app as cli

runner = CliRunner()
ORIGIN = "moat.local/log/t-unit"
LOG_KEY = Ed25519PrivateKey.generate()
OBJECTS = [f'{{"receipt":{n}}}'.encode() for n in range(6)]


def _note(leaves: list[bytes], key: Ed25519PrivateKey = LOG_KEY) -> str:
    root = translog.root_of([translog.leaf_hash(leaf) for leaf in leaves])
    body = translog.checkpoint_body(translog.Checkpoint(ORIGIN, len(leaves), root))
    return translog.sign_note(body, ORIGIN, key)


def _bundle(tmp_path: Path, start: int = 0) -> Path:
    """A bundle of receipts ``start``.. of a 6-leaf log, the 2nd a manifest retention removed."""
    out = tmp_path / "bundle"
    leaves = [hashlib.sha256(o).digest() for o in OBJECTS]
    hashes = [translog.leaf_hash(leaf) for leaf in leaves]

    def subtree(level: int, idx: int) -> bytes:
        return translog.root_of(hashes[idx << level : (idx + 1) << level])

    (out / "objects" / "receipts").mkdir(parents=True)
    (out / "checkpoint").write_text(_note(leaves))
    (out / "log.vkey").write_text(translog.make_vkey(ORIGIN, LOG_KEY.public_key()) + "\n")
    (out / "jwks.json").write_text('{"keys": []}')
    lines = []
    for i in range(start, len(OBJECTS)):
        entry = {"index": i, "kind": "receipt", "id": f"r{i}", "leaf": leaves[i].hex()}
        entry["object"] = f"objects/receipts/r{i}.json"
        (out / str(entry["object"])).write_bytes(OBJECTS[i])
        if i == 1:
            entry |= {"kind": "manifest", "object": None, "missing": "expired by retention"}
        entry["proof"] = [p.hex() for p in translog.inclusion_proof(i, len(OBJECTS), subtree)]
        lines.append(json.dumps(entry) + "\n")
    (out / "entries.jsonl").write_text("".join(lines))
    if start:
        proof = translog.consistency_proof(start, len(OBJECTS), subtree)
        document = {"from_checkpoint": _note(leaves[:start]), "proof": [p.hex() for p in proof]}
        (out / "consistency.json").write_text(json.dumps(document))
    return out


def _verify(bundle: Path, *extra: str) -> tuple[int, str]:
    result = runner.invoke(cli, ["evidence", "verify", str(bundle), *extra])
    return result.exit_code, result.stdout


def test_a_whole_bundle_verifies_and_counts_what_expired(tmp_path: Path) -> None:
    code, said = _verify(_bundle(tmp_path))
    assert code == 0, said
    assert "bundle verified" in said and "expired by retention │ 1" in said


def test_each_problem_is_one_line_naming_its_entry(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    (bundle / "objects" / "receipts" / "r3.json").write_bytes(b'{"receipt":33}')
    (bundle / "objects" / "receipts" / "r4.json").unlink()
    lines = (bundle / "entries.jsonl").read_text().splitlines(keepends=True)
    (bundle / "entries.jsonl").write_text("".join(lines[:2] + lines[3:]))
    code, said = _verify(bundle)
    assert code == 1
    assert said.splitlines() == [
        "entries: leaf 2 absent (indices must run from 0 to 5)",
        "receipt r3 (leaf 3): digest does not match the log",
        "receipt r4 (leaf 4): object missing (not in the bundle)",
    ]


def test_a_checkpoint_of_another_key_or_history_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, start=3)
    assert _verify(bundle)[0] == 0
    other = [hashlib.sha256(b"another history").digest(), *map(_digest, OBJECTS[1:3])]
    forked = tmp_path / "forked"
    forked.write_text(_note(other))
    code, said = _verify(bundle, "--checkpoint", str(forked))
    assert code == 1
    assert "consistency: checkpoint of size 3 is not consistent with size 6" in said
    stranger = tmp_path / "stranger"
    stranger.write_text(_note(list(map(_digest, OBJECTS[:3])), Ed25519PrivateKey.generate()))
    code, said = _verify(bundle, "--checkpoint", str(stranger))
    assert code == 1 and "earlier checkpoint: log signature does not verify" in said
    witness = translog.make_vkey("w1", LOG_KEY.public_key(), translog.ALG_COSIGNATURE_V1)
    code, said = _verify(bundle, "--witness", witness, "--min-witnesses", "1")
    assert code == 1 and "witnesses: 0 of 1 required cosignatures verify" in said
    (bundle / "log.vkey").write_text("not a key")
    assert _verify(bundle)[0] == 2


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def test_a_bundle_with_nothing_since_verifies_its_checkpoint_alone(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    (bundle / "entries.jsonl").write_text("")
    code, said = _verify(bundle)
    assert code == 0, said
    assert "from leaf" not in said and "tree size            │ 6" in said
