"""The transparency log's formats: RFC 9162 Merkle trees, C2SP checkpoints, signed notes
and cosignatures. Pure functions, no I/O: the store, the gateway, the witness and the
offline verifier all use them, and an independent verifier can be written from the same
rules with ``hashlib`` and ``cryptography`` alone.

Trees (RFC 9162 section 2.1)
    ``leaf_hash(data)``, ``node_hash(left, right)``, ``EMPTY_ROOT``,
    ``root_of(leaf_hashes)``: the root of a list of leaf hashes.
    ``largest_power_of_two_below(n)``: where a tree of n leaves is split.
    A *complete subtree* is ``(level, idx)``: the 2**level leaves starting at idx * 2**level.
    ``SubtreeHashes`` is a function returning the hash of a complete subtree (the store reads
    it from ``log_nodes``); ``subtree_hash(hashes, start, end)`` is the hash of leaves
    [start, end) from complete ones, O(log n) calls.
    ``inclusion_proof(index, size, hashes)``, ``consistency_proof(old, new, hashes)``:
    proof generation (RFC 9162 2.1.3.1 / 2.1.4.1).
    ``verify_inclusion(leaf_hash, index, size, proof, root)``,
    ``verify_consistency(old_size, new_size, proof, old_root, new_root)``: verification
    (RFC 9162 2.1.3.2 / 2.1.4.2); both return a bool.
    ``inclusion_proof_length(index, size)`` and ``consistency_proof_length(old, new)``.

Checkpoints (C2SP tlog-checkpoint)
    ``Checkpoint(origin, size, root)``, ``checkpoint_body(cp)`` (three lines, each ending in
    "\\n": origin, decimal size, base64 root), ``parse_checkpoint(body)``.

Signed notes (C2SP signed-note, Ed25519)
    ``key_hash(name, algorithm, public_key_bytes)``: SHA-256(name || "\\n" || alg || key)[:4].
    ``make_vkey(name, public_key, algorithm)`` / ``parse_vkey(vkey) -> Verifier``:
    ``<name>+<hex key hash>+<base64(alg || public key)>``; ``ALG_ED25519`` (0x01) for a log,
    ``ALG_COSIGNATURE_V1`` (0x04) for a witness.
    ``sign_note(body, name, key)`` -> the note; ``split_note(note) -> (body, [SignatureLine])``;
    ``verify_note(note, verifier) -> body`` (raises ``NoteError`` unless a signature line by
    that key verifies); ``append_lines(note, lines)`` adds signature lines.

Cosignatures (C2SP tlog-cosignature, cosignature/v1)
    ``cosignature_message(body, timestamp)``, ``cosign(body, name, key, timestamp) -> line``,
    ``verify_cosignature(body, line, verifier) -> timestamp`` (raises ``NoteError``),
    ``cosignatures_by(note, verifier)``: the timestamps of that witness's valid lines.

Growing a tree (the sequencer)
    ``frontier(size)``: the maximal complete subtrees covering [0, size);
    ``extend(old_size, old_frontier_hashes, new_leaf_hashes)``: every subtree completed by
    appending; ``root_from_frontier(size, hashes)``.

Hex for URLs and JSON: ``to_hex`` / ``from_hex`` (64 lowercase characters for a hash).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
SIGNATURE_PREFIX = "\u2014 "
COSIGNATURE_HEADER = "cosignature/v1\n"

SubtreeHashes = Callable[[int, int], bytes]
"""``(level, idx) -> hash`` of the complete subtree of 2**level leaves from idx * 2**level."""


class NoteError(ValueError):
    """A checkpoint, note, verifier key or cosignature is malformed or does not verify."""


# --- trees ------------------------------------------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly below n (n >= 2)."""
    if n < 2:
        raise ValueError("a tree of fewer than 2 leaves is not split")
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root of the tree of these leaf hashes (RFC 9162 MTH), iteratively."""
    if not leaf_hashes:
        return EMPTY_ROOT
    level = list(leaf_hashes)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def subtree_hash(hashes: SubtreeHashes, start: int, end: int) -> bytes:
    """MTH of leaves [start, end) from complete subtrees: for the ranges proofs use
    (start a multiple of a power of two >= end - start) this is O(log n) calls."""
    n = end - start
    if n <= 0:
        raise ValueError("an empty range has no subtree hash")
    if n & (n - 1) == 0 and start % n == 0:
        return hashes(n.bit_length() - 1, start // n)
    k = largest_power_of_two_below(n)
    return node_hash(subtree_hash(hashes, start, start + k), subtree_hash(hashes, start + k, end))


def inclusion_proof(index: int, size: int, hashes: SubtreeHashes) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 2.1.3.1, leaf side first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    start, end, m = 0, size, index
    while end - start > 1:
        k = largest_power_of_two_below(end - start)
        if m < k:
            path.append(subtree_hash(hashes, start + k, end))
            end = start + k
        else:
            path.append(subtree_hash(hashes, start, start + k))
            start, m = start + k, m - k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, hashes: SubtreeHashes) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) of RFC 9162 2.1.4.1 (empty when old_size is 0 or
    equals new_size)."""
    if not 0 <= old_size <= new_size:
        raise ValueError(f"no consistency proof from {old_size} to {new_size}")
    if old_size in (0, new_size):
        return []
    path: list[bytes] = []
    start, end, m, whole = 0, new_size, old_size, True
    while m != end - start:
        k = largest_power_of_two_below(end - start)
        if m <= k:
            path.append(subtree_hash(hashes, start + k, end))
            end = start + k
        else:
            path.append(subtree_hash(hashes, start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:
        path.append(subtree_hash(hashes, start, end))
    path.reverse()
    return path


def inclusion_proof_length(index: int, size: int) -> int:
    return len(inclusion_proof(index, size, lambda _level, _idx: b""))


def consistency_proof_length(old_size: int, new_size: int) -> int:
    return len(consistency_proof(old_size, new_size, lambda _level, _idx: b""))


def _shift_while_even(fn: int, sn: int) -> tuple[int, int]:
    while fn & 1 == 0 and fn != 0:
        fn, sn = fn >> 1, sn >> 1
    return fn, sn


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 2.1.3.2: does ``proof`` show the leaf hash ``leaf`` at ``index`` in the
    tree of ``size`` leaves with this root?"""
    if not 0 <= index < size or any(len(p) != HASH_SIZE for p in proof):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            fn, sn = _shift_while_even(fn, sn)
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> bool:
    """RFC 9162 2.1.4.2: is the tree of ``new_size`` leaves with ``new_root`` an
    append-only extension of the one of ``old_size`` with ``old_root``? Equal sizes need an
    empty proof and equal roots; from the empty tree, an empty proof."""
    if not 0 <= old_size <= new_size or any(len(p) != HASH_SIZE for p in proof):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            fn, sn = _shift_while_even(fn, sn)
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


# --- checkpoints ------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def checkpoint_body(checkpoint: Checkpoint) -> str:
    """``<origin>\\n<size>\\n<base64 root>\\n``."""
    if not checkpoint.origin or "\n" in checkpoint.origin or checkpoint.size < 0:
        raise NoteError("a checkpoint needs a one-line origin and a size >= 0")
    if len(checkpoint.root) != HASH_SIZE:
        raise NoteError("a checkpoint's root is 32 bytes")
    root = base64.b64encode(checkpoint.root).decode()
    return f"{checkpoint.origin}\n{checkpoint.size}\n{root}\n"


def parse_checkpoint(body: str) -> Checkpoint:
    """The checkpoint of a note body (extension lines after the third are allowed)."""
    if not body.endswith("\n"):
        raise NoteError("a checkpoint body ends with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3 or not lines[0] or any(not line for line in lines[3:]):
        raise NoteError("a checkpoint has an origin, a size and a root hash line")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not size_text.isascii() or not size_text.isdigit() or size_text != str(int(size_text)):
        raise NoteError(f"checkpoint size {size_text!r} is not a decimal number")
    root = _b64decode(root_text)
    if len(root) != HASH_SIZE or base64.b64encode(root).decode() != root_text:
        raise NoteError("a checkpoint's root is the standard base64 of 32 bytes")
    return Checkpoint(origin=origin, size=int(size_text), root=root)


# --- keys and signed notes --------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    """A parsed verifier key: ``algorithm`` is ALG_ED25519 or ALG_COSIGNATURE_V1."""

    name: str
    key_hash: bytes
    algorithm: int
    public_key: Ed25519PublicKey


@dataclass(frozen=True)
class SignatureLine:
    """One signature line of a note: ``payload`` is what follows the 4-byte key hash."""

    name: str
    key_hash: bytes
    payload: bytes
    line: str


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_hash(name: str, algorithm: int, public_key: bytes) -> bytes:
    """SHA-256(name || "\\n" || algorithm byte || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([algorithm]) + public_key).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" or not c.isprintable() for c in name):
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")


def make_vkey(name: str, public_key: Ed25519PublicKey, algorithm: int = ALG_ED25519) -> str:
    """``<name>+<hex key hash>+<base64(algorithm || public key)>``."""
    _check_name(name)
    raw = public_key_bytes(public_key)
    encoded = base64.b64encode(bytes([algorithm]) + raw).decode()
    return f"{name}+{key_hash(name, algorithm, raw).hex()}+{encoded}"


def parse_vkey(vkey: str) -> Verifier:
    """A verifier key string, its key hash checked against its name and key."""
    parts = vkey.strip().split("+", 2)
    if len(parts) != 3:
        raise NoteError("a verifier key is <name>+<key hash hex>+<base64 key>")
    name, hash_hex, key_text = parts
    _check_name(name)
    key = _b64decode(key_text)
    if len(key) != 33 or key[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise NoteError("a verifier key holds an Ed25519 (0x01) or cosignature/v1 (0x04) key")
    expected = key_hash(name, key[0], key[1:])
    if hash_hex != expected.hex():
        raise NoteError("the verifier key's hash does not match its name and key")
    return Verifier(name, expected, key[0], Ed25519PublicKey.from_public_bytes(key[1:]))


def _signature_line(name: str, payload: bytes) -> str:
    return f"{SIGNATURE_PREFIX}{name} {base64.b64encode(payload).decode()}\n"


def sign_note(body: str, name: str, key: Ed25519PrivateKey) -> str:
    """The signed note: ``body``, an empty line, and the Ed25519 signature line of ``name``."""
    _check_name(name)
    if not body.endswith("\n") or "\n\n" in body:
        raise NoteError("a note's text ends with a newline and has no empty line")
    hashed = key_hash(name, ALG_ED25519, public_key_bytes(key.public_key()))
    return body + "\n" + _signature_line(name, hashed + key.sign(body.encode()))


def split_note(note: str) -> tuple[str, list[SignatureLine]]:
    """A note's text and its signature lines (unverified)."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("a signed note is text, an empty line, then signature lines")
    body, lines = note[: split + 1], note[split + 2 :].splitlines(keepends=True)
    signatures = [_parse_signature_line(line) for line in lines]
    if not signatures:
        raise NoteError("a signed note has at least one signature line")
    return body, signatures


def _parse_signature_line(line: str) -> SignatureLine:
    if not line.startswith(SIGNATURE_PREFIX) or not line.endswith("\n"):
        raise NoteError("a signature line is '\u2014 <name> <base64>' ending in a newline")
    fields = line[len(SIGNATURE_PREFIX) : -1].split(" ")
    if len(fields) != 2:
        raise NoteError("a signature line has a key name and a base64 signature")
    _check_name(fields[0])
    raw = _b64decode(fields[1])
    if len(raw) < 5:
        raise NoteError("a signature is a 4-byte key hash and the signature")
    return SignatureLine(fields[0], raw[:4], raw[4:], line)


def append_lines(note: str, lines: Iterable[str]) -> str:
    """The note with more signature lines after its own (each checked for form)."""
    split_note(note)
    extra = [_parse_signature_line(line).line for line in lines]
    return note + "".join(extra)


def verify_note(note: str, verifier: Verifier) -> str:
    """The note's text, if a signature line of ``verifier`` (an Ed25519 key) verifies."""
    if verifier.algorithm != ALG_ED25519:
        raise NoteError("a note is verified with an Ed25519 (0x01) verifier key")
    body, signatures = split_note(note)
    for sig in signatures:
        if sig.name == verifier.name and sig.key_hash == verifier.key_hash:
            try:
                verifier.public_key.verify(sig.payload, body.encode())
            except InvalidSignature:
                continue
            return body
    raise NoteError(f"no valid signature by {verifier.name} on this note")


# --- cosignatures -----------------------------------------------------------------------


def cosignature_message(body: str, timestamp: int) -> bytes:
    """The bytes a witness signs: "cosignature/v1\\ntime <T>\\n" then the checkpoint body."""
    if timestamp < 0:
        raise NoteError("a cosignature's time is seconds since the epoch")
    return f"{COSIGNATURE_HEADER}time {timestamp}\n{body}".encode()


def cosign(body: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """The witness's cosignature line of the checkpoint ``body`` at ``timestamp``."""
    _check_name(name)
    hashed = key_hash(name, ALG_COSIGNATURE_V1, public_key_bytes(key.public_key()))
    signature = key.sign(cosignature_message(body, timestamp))
    return _signature_line(name, hashed + struct.pack(">Q", timestamp) + signature)


def verify_cosignature(body: str, line: str, verifier: Verifier) -> int:
    """The cosignature's timestamp, if ``line`` is ``verifier``'s valid cosignature of
    ``body``."""
    if verifier.algorithm != ALG_COSIGNATURE_V1:
        raise NoteError("a cosignature is verified with a cosignature/v1 (0x04) verifier key")
    sig = _parse_signature_line(line)
    if sig.name != verifier.name or sig.key_hash != verifier.key_hash:
        raise NoteError(f"this line is not a cosignature by {verifier.name}")
    if len(sig.payload) != 8 + 64:
        raise NoteError("a cosignature is a key hash, an 8-byte time and a signature")
    (timestamp,) = struct.unpack(">Q", sig.payload[:8])
    try:
        verifier.public_key.verify(sig.payload[8:], cosignature_message(body, timestamp))
    except InvalidSignature as exc:
        raise NoteError(f"the cosignature by {verifier.name} does not verify") from exc
    return int(timestamp)


def cosignatures_by(note: str, verifier: Verifier) -> list[int]:
    """The timestamps of ``verifier``'s valid cosignature lines on the note."""
    body, signatures = split_note(note)
    valid: list[int] = []
    for sig in signatures:
        if sig.name == verifier.name and sig.key_hash == verifier.key_hash:
            try:
                valid.append(verify_cosignature(body, sig.line, verifier))
            except NoteError:
                continue
    return valid


# --- encodings --------------------------------------------------------------------------


def to_hex(digest: bytes) -> str:
    return digest.hex()


def from_hex(text: str) -> bytes:
    """32 bytes from 64 lowercase hex characters."""
    if len(text) != 2 * HASH_SIZE or text != text.lower():
        raise NoteError("a hash is 64 lowercase hex characters")
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise NoteError("a hash is 64 lowercase hex characters") from exc


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError("not standard base64") from exc


# --- growing a tree by complete subtrees ------------------------------------------------


def frontier(size: int) -> list[tuple[int, int]]:
    """The maximal complete subtrees ``(level, idx)`` covering leaves [0, size), left to
    right: the only nodes of a tree that a larger tree's new nodes build on."""
    out: list[tuple[int, int]] = []
    start = 0
    for level in reversed(range(size.bit_length())):
        if size >> level & 1:
            out.append((level, start >> level))
            start += 1 << level
    return out


def extend(
    old_size: int, old_frontier: dict[tuple[int, int], bytes], leaves: Sequence[bytes]
) -> dict[tuple[int, int], bytes]:
    """Every complete subtree that appending the leaf hashes ``leaves`` to a tree of
    ``old_size`` completes (level 0 included), given the hashes of ``frontier(old_size)``."""
    new_size = old_size + len(leaves)
    made = {(0, old_size + k): h for k, h in enumerate(leaves)}
    level = 1
    while new_size >> level:
        for j in range(old_size >> level, new_size >> level):
            left = made.get((level - 1, 2 * j)) or old_frontier[(level - 1, 2 * j)]
            made[(level, j)] = node_hash(left, made[(level - 1, 2 * j + 1)])
        level += 1
    return made


def root_from_frontier(size: int, hashes: dict[tuple[int, int], bytes]) -> bytes:
    """The root of a tree of ``size`` leaves from the hashes of ``frontier(size)``."""
    nodes = frontier(size)
    if not nodes:
        return EMPTY_ROOT
    root = hashes[nodes[-1]]
    for node in reversed(nodes[:-1]):
        root = node_hash(hashes[node], root)
    return root
