"""The transparency log's formats: RFC 9162 proofs against brute force for every tree of
1..64 leaves, and signed notes, verifier keys and cosignatures refusing any tampering."""

from __future__ import annotations

import base64
import hashlib
import itertools

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from schemas import translog as t

N = 64
LEAVES = [t.leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(N)]


def mth(hashes: list[bytes]) -> bytes:
    """RFC 9162 MTH, straight from its recursive definition."""
    if not hashes:
        return t.EMPTY_ROOT
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return t.node_hash(mth(hashes[:k]), mth(hashes[k:]))


def path(m: int, hashes: list[bytes]) -> list[bytes]:
    if len(hashes) == 1:
        return []
    k = t.largest_power_of_two_below(len(hashes))
    if m < k:
        return [*path(m, hashes[:k]), mth(hashes[k:])]
    return [*path(m - k, hashes[k:]), mth(hashes[:k])]


def subproof(m: int, hashes: list[bytes], whole: bool) -> list[bytes]:
    if m == len(hashes):
        return [] if whole else [mth(hashes)]
    k = t.largest_power_of_two_below(len(hashes))
    if m <= k:
        return [*subproof(m, hashes[:k], whole), mth(hashes[k:])]
    return [*subproof(m - k, hashes[k:], False), mth(hashes[:k])]


def complete(level: int, idx: int) -> bytes:
    """The complete-subtree function the store implements, over LEAVES."""
    width = 1 << level
    return mth(LEAVES[idx * width : (idx + 1) * width])


def test_known_roots() -> None:
    """The RFC 6962 reference tree (certificate-transparency's test vectors)."""
    data = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243")]
    data += [bytes.fromhex("5051525354555657"), bytes(range(0x60, 0x70))]
    roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
    hashes = [t.leaf_hash(d) for d in data]
    assert t.root_of([]).hex() == hashlib.sha256(b"").hexdigest()
    assert [t.root_of(hashes[:n]).hex() for n in range(1, 9)] == roots


def test_roots_and_subtrees_match_brute_force() -> None:
    for n in range(1, N + 1):
        assert t.root_of(LEAVES[:n]) == mth(LEAVES[:n])
        assert t.subtree_hash(complete, 0, n) == mth(LEAVES[:n])
    for start, end in itertools.combinations(range(N + 1), 2):
        assert t.subtree_hash(complete, start, end) == mth(LEAVES[start:end])


def test_every_inclusion_proof_up_to_64_leaves() -> None:
    for n in range(1, N + 1):
        root = mth(LEAVES[:n])
        for m in range(n):
            proof = t.inclusion_proof(m, n, complete)
            assert proof == path(m, LEAVES[:n])
            assert len(proof) == t.inclusion_proof_length(m, n)
            assert t.verify_inclusion(LEAVES[m], m, n, proof, root)
            assert not t.verify_inclusion(LEAVES[(m + 1) % N], m, n, proof, root)
            if n > 1:
                assert not t.verify_inclusion(LEAVES[m], (m + 1) % n, n, proof, root)
                bad = [*proof[:-1], bytes(32)]
                assert not t.verify_inclusion(LEAVES[m], m, n, bad, root)
                assert not t.verify_inclusion(LEAVES[m], m, n, proof[:-1], root)
            assert not t.verify_inclusion(LEAVES[m], m, n, [*proof, bytes(32)], root)


def test_every_consistency_proof_up_to_64_leaves() -> None:
    for n in range(1, N + 1):
        new_root = mth(LEAVES[:n])
        for m in range(0, n + 1):
            old_root = mth(LEAVES[:m])
            proof = t.consistency_proof(m, n, complete)
            assert proof == ([] if m == 0 else subproof(m, LEAVES[:n], True))
            assert len(proof) == t.consistency_proof_length(m, n)
            assert t.verify_consistency(m, n, proof, old_root, new_root)
            if 0 < m < n:
                forked = mth([*LEAVES[: m - 1], bytes(32)])
                assert not t.verify_consistency(m, n, proof, forked, new_root)
                assert not t.verify_consistency(m, n, proof, old_root, mth(LEAVES[: n - 1]))
                assert not t.verify_consistency(m, n, [*proof[:-1], bytes(32)], old_root, new_root)
                assert not t.verify_consistency(m, n, proof[:-1], old_root, new_root)
                assert not t.verify_consistency(m, n, [*proof, bytes(32)], old_root, new_root)
    assert not t.verify_consistency(3, 2, [], mth(LEAVES[:3]), mth(LEAVES[:2]))


def test_checkpoint_body_round_trip() -> None:
    cp = t.Checkpoint("moat.local/log/acme", 17, LEAVES[3])
    body = t.checkpoint_body(cp)
    lines = body.split("\n")
    assert lines == ["moat.local/log/acme", "17", base64.b64encode(LEAVES[3]).decode(), ""]
    assert t.parse_checkpoint(body) == cp
    for bad in (body[:-1], body.replace("17", "017"), body.replace("17", "-1"), "a\n1\n"):
        with pytest.raises(t.NoteError):
            t.parse_checkpoint(bad)


LOG_KEY = Ed25519PrivateKey.generate()
WITNESS_KEY = Ed25519PrivateKey.generate()
ORIGIN = "moat.local/log/acme"
BODY = t.checkpoint_body(t.Checkpoint(ORIGIN, 5, LEAVES[0]))


def test_vkey_round_trip_and_key_hash() -> None:
    vkey = t.make_vkey(ORIGIN, LOG_KEY.public_key())
    name, hash_hex, key_b64 = vkey.split("+", 2)
    raw = t.public_key_bytes(LOG_KEY.public_key())
    assert name == ORIGIN and base64.b64decode(key_b64) == b"\x01" + raw
    assert hash_hex == hashlib.sha256(ORIGIN.encode() + b"\n\x01" + raw).digest()[:4].hex()
    verifier = t.parse_vkey(vkey)
    assert (verifier.name, verifier.algorithm) == (ORIGIN, t.ALG_ED25519)
    wrong_name = "other" + vkey[len(ORIGIN) :]
    for bad in (wrong_name, vkey.replace(hash_hex, "00000000"), vkey + "x=", "a+b"):
        with pytest.raises(t.NoteError):
            t.parse_vkey(bad)
    witness = t.make_vkey("w1", WITNESS_KEY.public_key(), t.ALG_COSIGNATURE_V1)
    assert base64.b64decode(witness.split("+", 2)[2])[0] == 4
    assert t.parse_vkey(witness).algorithm == t.ALG_COSIGNATURE_V1


def test_signed_note_verifies_and_refuses_tampering() -> None:
    note = t.sign_note(BODY, ORIGIN, LOG_KEY)
    assert note.startswith(BODY + "\n\u2014 " + ORIGIN + " ")
    verifier = t.parse_vkey(t.make_vkey(ORIGIN, LOG_KEY.public_key()))
    assert t.verify_note(note, verifier) == BODY
    raw = base64.b64decode(note.rsplit(" ", 1)[1])
    assert raw[:4] == verifier.key_hash and len(raw) == 68
    for i in range(len(BODY)):
        changed = BODY[:i] + ("x" if BODY[i] != "x" else "y") + BODY[i + 1 :]
        with pytest.raises(t.NoteError):
            t.verify_note(changed + note[len(BODY) :], verifier)
    other_key = t.parse_vkey(t.make_vkey(ORIGIN, Ed25519PrivateKey.generate().public_key()))
    other_name = t.parse_vkey(t.make_vkey("moat.local/log/zeta", LOG_KEY.public_key()))
    forged = t.sign_note(BODY, ORIGIN, Ed25519PrivateKey.generate())
    for v, n in ((other_key, note), (other_name, note), (verifier, forged)):
        with pytest.raises(t.NoteError):
            t.verify_note(n, v)
    sig_bytes = bytearray(raw)
    sig_bytes[10] ^= 1
    flipped = BODY + "\n\u2014 " + ORIGIN + " " + base64.b64encode(bytes(sig_bytes)).decode()
    with pytest.raises(t.NoteError):
        t.verify_note(flipped + "\n", verifier)


def test_cosignature_round_trip_and_tampering() -> None:
    note = t.sign_note(BODY, ORIGIN, LOG_KEY)
    line = t.cosign(BODY, "witness.example/w1", WITNESS_KEY, 1_700_000_000)
    payload = base64.b64decode(line.split(" ")[2])
    assert len(payload) == 4 + 8 + 64 and payload[4:12] == (1_700_000_000).to_bytes(8, "big")
    verifier = t.parse_vkey(t.make_vkey("witness.example/w1", WITNESS_KEY.public_key(), 4))
    assert t.verify_cosignature(BODY, line, verifier) == 1_700_000_000
    message = b"cosignature/v1\ntime 1700000000\n" + BODY.encode()
    WITNESS_KEY.public_key().verify(payload[12:], message)
    cosigned = t.append_lines(note, [line])
    assert t.cosignatures_by(cosigned, verifier) == [1_700_000_000]
    log_verifier = t.parse_vkey(t.make_vkey(ORIGIN, LOG_KEY.public_key()))
    assert t.verify_note(cosigned, log_verifier) == BODY
    other_body = t.checkpoint_body(t.Checkpoint(ORIGIN, 6, LEAVES[0]))
    other_witness = t.parse_vkey(
        t.make_vkey("witness.example/w1", Ed25519PrivateKey.generate().public_key(), 4)
    )
    renamed = t.parse_vkey(t.make_vkey("witness.example/w2", WITNESS_KEY.public_key(), 4))
    retimed = base64.b64encode(payload[:4] + (1).to_bytes(8, "big") + payload[12:]).decode()
    retimed_line = f"\u2014 witness.example/w1 {retimed}\n"
    for body, ln, v in (
        (other_body, line, verifier),
        (BODY, line, other_witness),
        (BODY, line, renamed),
        (BODY, retimed_line, verifier),
        (BODY, line, log_verifier),
    ):
        with pytest.raises(t.NoteError):
            t.verify_cosignature(body, ln, v)
    assert t.cosignatures_by(t.append_lines(note, [retimed_line]), verifier) == []


def test_hex_helpers() -> None:
    assert t.from_hex(t.to_hex(LEAVES[1])) == LEAVES[1]
    for bad in ("ab", LEAVES[1].hex().upper(), "zz" * 32):
        with pytest.raises(t.NoteError):
            t.from_hex(bad)


def test_extending_a_tree_builds_every_complete_subtree() -> None:
    for old in range(0, 40):
        for new in range(old, 48):
            front = {node: complete(*node) for node in t.frontier(old)}
            made = t.extend(old, front, LEAVES[old:new])
            expected = {
                (level, j)
                for level in range(7)
                for j in range(new >> level)
                if (j + 1) << level > old
            }
            assert set(made) == expected
            assert all(made[node] == complete(*node) for node in made)
            everything = {**front, **made}
            assert t.root_from_frontier(new, everything) == mth(LEAVES[:new])
