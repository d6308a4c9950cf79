"""The independent verifier against bundles made by a builder of its own (below), written from
the same published format: RFC 9162 trees and proofs, C2SP checkpoints, signed notes and
cosignatures, and ES256 manifests signed as a detached JWS over their RFC 8785 bytes."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.evidence.independent_verifier import climb, consistent, verify_bundle

ORIGIN = "moat.local/log/acme"


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# RFC 9162 section 2.1: the tree, and the proofs of 2.1.3.1 and 2.1.4.1.


def split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return sha(b"")
    if len(leaves) == 1:
        return sha(b"\x00" + leaves[0])
    k = split(len(leaves))
    return sha(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))


def inclusion(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) <= 1:
        return []
    k = split(len(leaves))
    if m < k:
        return [*inclusion(m, leaves[:k]), mth(leaves[k:])]
    return [*inclusion(m - k, leaves[k:]), mth(leaves[:k])]


def subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = split(n)
    if m <= k:
        return [*subproof(m, leaves[:k], whole), mth(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), mth(leaves[:k])]


def consistency(m: int, leaves: list[bytes]) -> list[bytes]:
    return [] if m in (0, len(leaves)) else subproof(m, leaves, True)


# C2SP signed notes: the log's Ed25519 key (0x01) and witnesses' cosignatures (0x04).


def key_hash(name: str, alg: bytes, key: ed25519.Ed25519PrivateKey) -> bytes:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return sha(name.encode() + b"\n" + alg + raw)[:4]


def vkey(name: str, alg: bytes, key: ed25519.Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return f"{name}+{key_hash(name, alg, key).hex()}+{b64(alg + raw)}"


def body(size: int, root: bytes, origin: str = ORIGIN) -> str:
    return f"{origin}\n{size}\n{b64(root)}\n"


def sign_note(text: str, name: str, key: ed25519.Ed25519PrivateKey) -> str:
    sig = key_hash(name, b"\x01", key) + key.sign(text.encode())
    return f"{text}\n\u2014 {name} {b64(sig)}\n"


def cosign(note: str, name: str, key: ed25519.Ed25519PrivateKey, when: int = 1_790_000_000) -> str:
    text = note.split("\n\n")[0] + "\n"
    signed = f"cosignature/v1\ntime {when}\n{text}".encode()
    blob = key_hash(name, b"\x04", key) + when.to_bytes(8, "big") + key.sign(signed)
    return f"{note}\u2014 {name} {b64(blob)}\n"


# Manifests: ES256 detached JWS over the RFC 8785 bytes of the manifest without `signatures`.


def jcs(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def es256_jwk(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    jwk = {
        "crv": "P-256",
        "kty": "EC",
        "x": b64url(numbers.x.to_bytes(32, "big")),
        "y": b64url(numbers.y.to_bytes(32, "big")),
    }
    return {**jwk, "kid": b64url(sha(jcs(jwk))), "alg": "ES256", "use": "sig"}


def sign_manifest(manifest: dict[str, object], key: ec.EllipticCurvePrivateKey) -> bytes:
    kid = es256_jwk(key)["kid"]
    header = b64url(json.dumps({"alg": "ES256", "kid": kid}).encode())
    signing_input = f"{header}.{b64url(jcs(manifest))}".encode()
    r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
    jws = f"{header}..{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"
    entry = {"algorithm": "ES256", "kid": kid, "signer": "moat", "jws": jws}
    return json.dumps({**manifest, "signatures": [entry]}, indent=2).encode()


@dataclass
class Log:
    """A tenant's log and everything a bundle is made of."""

    key: ed25519.Ed25519PrivateKey = field(default_factory=ed25519.Ed25519PrivateKey.generate)
    jws_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    objects: list[tuple[str, str, bytes]] = field(default_factory=list)

    def add(self, kind: str, ident: str, data: bytes) -> None:
        self.objects.append((kind, ident, data))

    @property
    def leaves(self) -> list[bytes]:
        return [sha(data) for _, _, data in self.objects]

    def checkpoint(self, size: int) -> str:
        return sign_note(body(size, mth(self.leaves[:size])), ORIGIN, self.key)

    def write(self, out: Path, since: int = 0, earlier: int | None = None) -> Path:
        size, leaves = len(self.objects), self.leaves
        (out / "witnesses").mkdir(parents=True)
        (out / "checkpoint").write_text(self.checkpoint(size))
        (out / "log.vkey").write_text(vkey(ORIGIN, b"\x01", self.key) + "\n")
        (out / "jwks.json").write_text(json.dumps({"keys": [es256_jwk(self.jws_key)]}))
        rows = []
        for index in range(since, size):
            kind, ident, data = self.objects[index]
            path = out / f"objects/{kind}s/{ident}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            proof = [p.hex() for p in inclusion(index, leaves)]
            obj = f"objects/{kind}s/{ident}.json"
            row = {"index": index, "kind": kind, "id": ident, "leaf": leaves[index].hex()}
            rows.append(json.dumps({**row, "object": obj, "proof": proof}))
        (out / "entries.jsonl").write_text("".join(f"{row}\n" for row in rows))
        if earlier is not None:
            proof = [p.hex() for p in consistency(earlier, leaves)]
            cons = {"from_checkpoint": self.checkpoint(earlier), "proof": proof}
            (out / "consistency.json").write_text(json.dumps(cons))
        return out


def make_log(n: int = 11) -> Log:
    log = Log()
    for i in range(n):
        if i % 3 == 0:
            manifest = {
                "run_id": f"run-{i}",
                "status": "COMPLETED",
                "tools": [{"n": i, "to": "café"}],
            }
            log.add("manifest", f"run-{i}", sign_manifest(manifest, log.jws_key))
        else:
            receipt = {"id": f"r-{i}", "status": "succeeded", "provider_evidence": {"ts": i}}
            log.add("receipt", f"r-{i}", jcs(receipt))
    return log


@pytest.fixture(scope="module")
def log() -> Log:
    return make_log()


@pytest.fixture
def bundle(log: Log, tmp_path: Path) -> Path:
    return log.write(tmp_path / "bundle", since=0, earlier=5)


def entry(bundle: Path, index: int) -> dict[str, object]:
    rows = [json.loads(line) for line in (bundle / "entries.jsonl").read_text().splitlines()]
    return next(row for row in rows if row["index"] == index)


def rewrite_entries(bundle: Path, change: dict[int, dict[str, object] | None]) -> None:
    rows = [json.loads(line) for line in (bundle / "entries.jsonl").read_text().splitlines()]
    dropped = {index for index, new in change.items() if new is None}
    kept = [{**row, **(change.get(row["index"]) or {})} for row in rows]
    kept = [row for row in kept if row["index"] not in dropped]
    (bundle / "entries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept))


def test_the_builder_agrees_with_rfc_9162_on_every_size() -> None:
    leaves = [sha(bytes([i])) for i in range(13)]
    assert mth([]) == hashlib.sha256(b"").digest()
    for n in range(1, 14):
        root = mth(leaves[:n])
        for i in range(n):
            proof = [p.hex() for p in inclusion(i, leaves[:n])]
            assert climb(i, n - 1, proof, [sha(b"\x00" + leaves[i])], [root])
        for m in range(0, n + 1):
            proof = [p.hex() for p in consistency(m, leaves[:n])]
            assert consistent(m, n, mth(leaves[:m]), root, proof), (m, n)
            if 0 < m < n:
                assert not consistent(m, n, sha(b"other"), root, proof)


def test_a_good_bundle_verifies(bundle: Path, log: Log) -> None:
    assert verify_bundle(bundle) == []
    since = log.write(bundle.parent / "since", since=7)
    assert verify_bundle(since, earlier_checkpoint=log.checkpoint(11)) == []


def test_an_object_changed_by_one_byte_is_named(bundle: Path) -> None:
    path = bundle / "objects/receipts/r-4.json"
    data = bytearray(path.read_bytes())
    data[7] ^= 0x01
    path.write_bytes(bytes(data))
    assert verify_bundle(bundle) == ["receipt r-4 (leaf 4): digest does not match the log"]


def test_a_deleted_object_is_named(bundle: Path) -> None:
    (bundle / "objects/manifests/run-6.json").unlink()
    assert verify_bundle(bundle) == ["manifest run-6 (leaf 6): object missing (no file)"]
    rewrite_entries(bundle, {6: {"object": None, "missing": "expired by retention"}})
    problems = verify_bundle(bundle)
    assert problems == ["manifest run-6 (leaf 6): object missing (expired by retention)"]


def test_a_dropped_entry_breaks_the_indices(bundle: Path) -> None:
    rewrite_entries(bundle, {3: None})
    problems = verify_bundle(bundle)
    assert problems == ["entries: indices not contiguous up to the checkpoint's size, 11"]


def test_a_wrong_proof_hash_is_named(bundle: Path) -> None:
    proof = list(entry(bundle, 2)["proof"])  # type: ignore[call-overload]
    proof[1] = sha(b"not a node").hex()
    rewrite_entries(bundle, {2: {"proof": proof}})
    problems = verify_bundle(bundle)
    assert problems == [
        "receipt r-2 (leaf 2): inclusion proof does not verify against the checkpoint"
    ]


def test_a_manifest_whose_signature_fails_is_named(log: Log, tmp_path: Path) -> None:
    changed = Log(key=log.key, jws_key=log.jws_key, objects=list(log.objects))
    signed = json.loads(changed.objects[9][2])
    signed["status"] = "FAILED"  # changed after signing, its leaf made to agree
    changed.objects[9] = ("manifest", "run-9", json.dumps(signed).encode())
    bundle = changed.write(tmp_path / "b")
    failed = "manifest signature does not verify with jwks.json"
    assert verify_bundle(bundle) == [f"manifest run-9 (leaf 9): {failed}"]
    stranger = es256_jwk(ec.generate_private_key(ec.SECP256R1()))
    (bundle / "jwks.json").write_text(json.dumps({"keys": [stranger]}))
    assert verify_bundle(bundle) == [f"manifest run-{i} (leaf {i}): {failed}" for i in (0, 3, 6, 9)]


def test_a_bad_log_signature_is_named(bundle: Path) -> None:
    note = (bundle / "checkpoint").read_text()
    text, _, line = note.partition("\n\n")
    name, blob = line.rstrip("\n").rsplit(" ", 1)
    sig = bytearray(base64.b64decode(blob))
    sig[-1] ^= 0x01
    (bundle / "checkpoint").write_text(f"{text}\n\n{name} {b64(bytes(sig))}\n")
    assert verify_bundle(bundle) == ["checkpoint: no signature by the log key verifies"]


def test_a_checkpoint_from_another_key_is_named(bundle: Path, log: Log) -> None:
    impostor = ed25519.Ed25519PrivateKey.generate()
    forged = sign_note(body(11, mth(log.leaves)), ORIGIN, impostor)
    (bundle / "checkpoint").write_text(forged)
    assert verify_bundle(bundle) == ["checkpoint: no signature by the log key verifies"]


def test_a_forked_earlier_checkpoint_is_named(bundle: Path, log: Log) -> None:
    forked = list(log.leaves[:5])
    forked[2] = sha(b"the history shown to another auditor")
    earlier = sign_note(body(5, mth(forked)), ORIGIN, log.key)
    problems = verify_bundle(bundle, earlier_checkpoint=earlier)
    assert problems == ["checkpoint (11 leaves) not consistent with the earlier one (5)"]
    cons = json.loads((bundle / "consistency.json").read_text())
    (bundle / "consistency.json").write_text(json.dumps({**cons, "from_checkpoint": earlier}))
    assert verify_bundle(bundle) == problems


def test_witness_cosignatures_count_only_for_known_witnesses(bundle: Path) -> None:
    known, unknown = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    known_vkey = vkey("witness.example/w1", b"\x04", known)
    note = (bundle / "checkpoint").read_text()
    (bundle / "checkpoint").write_text(cosign(note, "witness.example/w2", unknown))
    problems = verify_bundle(bundle, [known_vkey], min_witnesses=1)
    assert problems == ["checkpoint: 0 witness cosignatures verify, 1 required"]
    # the unknown witness's line, renamed as the known one, does not verify with its key
    # (its name alone: "w2" may also occur in the base64 of the log key's own signature)
    renamed = cosign(note, "witness.example/w2", unknown).replace(
        "witness.example/w2", "witness.example/w1"
    )
    (bundle / "checkpoint").write_text(renamed)
    assert verify_bundle(bundle, [known_vkey], min_witnesses=1) == problems
    (bundle / "checkpoint").write_text(cosign(note, "witness.example/w1", known))
    assert verify_bundle(bundle, [known_vkey], min_witnesses=1) == []
    (bundle / "witnesses/w1.vkey").write_text(known_vkey)  # trusted only when the caller names it
    assert verify_bundle(bundle, min_witnesses=1) == problems


def test_a_checkpoint_of_another_origin_under_the_same_key_is_refused(
    bundle: Path, log: Log
) -> None:
    """One key signing two tenants' logs: tenant b's checkpoint, its line named as tenant a's."""
    other = sign_note(body(11, mth(log.leaves), "moat.local/log/b"), ORIGIN, log.key)
    (bundle / "checkpoint").write_text(other)
    assert verify_bundle(bundle) == ["checkpoint: no signature by the log key verifies"]


def test_an_earlier_checkpoint_of_every_size_is_consistent(log: Log, tmp_path: Path) -> None:
    for m in range(12):
        bundle = log.write(tmp_path / f"b{m}", since=9, earlier=m)
        assert verify_bundle(bundle) == [], m
        (bundle / "consistency.json").unlink()  # the earlier checkpoint alone: no proof
        unproved = [f"checkpoint (11 leaves) not consistent with the earlier one ({m})"]
        expected = [] if m in (0, 11) else unproved
        assert verify_bundle(bundle, earlier_checkpoint=log.checkpoint(m)) == expected


def test_an_unsigned_earlier_checkpoint_is_named(log: Log, tmp_path: Path) -> None:
    bundle = log.write(tmp_path / "b", since=9, earlier=4)
    cons = json.loads((bundle / "consistency.json").read_text())
    cons["from_checkpoint"] = cons["from_checkpoint"].split("\n\n")[0] + "\n\n"
    (bundle / "consistency.json").write_text(json.dumps(cons))
    assert verify_bundle(bundle) == ["earlier checkpoint: no signature by the log key verifies"]
