"""Verify a Moat evidence bundle offline from its published format alone: stdlib + cryptography."""

import json
from base64 import b64decode, urlsafe_b64decode, urlsafe_b64encode
from collections.abc import Sequence
from contextlib import suppress
from hashlib import sha256
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils
from cryptography.hazmat.primitives.hashes import SHA256


def climb(fn: int, sn: int, path: list[str], r: list[bytes], want: list[bytes]) -> bool:
    """RFC 9162 2.1.3.2 (r = [leaf hash]), and 2.1.4.2 from its step 5 (r = [fr, sr])."""
    for p in map(bytes.fromhex, path):
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = [sha256(b"\x01" + p + x).digest() for x in r]
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r[-1] = sha256(b"\x01" + r[-1] + p).digest()
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == want


def consistent(m: int, n: int, old: bytes, new: bytes, proof: list[str]) -> bool:
    if not 0 < m < n or not proof:  # from the empty tree, or to the same one: nothing to prove
        return not proof and (m == 0 or (m == n and old == new))
    k = ((m - 1) ^ m).bit_length() - 1  # RFC 9162 2.1.4.2 step 4: m - 1's trailing 1 bits
    path = [old.hex()] * (m & (m - 1) == 0) + proof  # steps 2-3: old root first if m = 2^i
    return climb(m - 1 >> k, n - 1 >> k, path[1:], [bytes.fromhex(path[0])] * 2, [old, new])


def signed(note: str, vkey: str, alg: bytes = b"\x01") -> bool:
    """A line "— name base64(key hash, [time,] signature)" verifies (0x01 log, 0x04 witness)."""
    (body, _, lines), (name, _, key) = note.partition("\n\n"), vkey.strip().split("+", 2)
    raw, prefix, msg = b64decode(key), f"\u2014 {name} ", f"{body}\n".encode()
    khash = sha256(f"{name}\n".encode() + raw).digest()[:4]
    named = alg == b"\x04" or body.startswith(f"{name}\n")  # a log's key is named as its origin
    for sig in (b64decode(ln[len(prefix) :]) for ln in lines.splitlines() if ln.startswith(prefix)):
        cos = b"cosignature/v1\ntime %d\n" % int.from_bytes(sig[4:12]) if alg == b"\x04" else b""
        with suppress(Exception):
            ed25519.Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig[-64:], cos + msg)
            return named and raw[:1] == alg and sig[:4] == khash and len(sig) == 68 + 8 * bool(cos)
    return False


def jws_ok(manifest: dict, jwks: dict) -> bool:  # ES256 detached JWS (h..sig) over the rest's JCS
    jwss = [s for e in manifest.pop("signatures", []) for s in e.values() if ".." in str(s)]
    jcs = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    payload = urlsafe_b64encode(jcs.encode()).rstrip(b"=").decode()
    with suppress(Exception):
        for head, _, sig in (jws.partition("..") for jws in jwss):
            hdr, raw = json.loads(urlsafe_b64decode(head + "==")), urlsafe_b64decode(sig + "==")
            x, y = (int.from_bytes(urlsafe_b64decode(jwks[hdr["kid"]][c] + "==")) for c in "xy")
            rs = utils.encode_dss_signature(int.from_bytes(raw[:32]), int.from_bytes(raw[32:]))
            pub = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
            pub.verify(rs, f"{head}.{payload}".encode(), ec.ECDSA(SHA256()))
        return bool(jwss)
    return False


def verify_bundle(
    bundle: Path,
    witness_vkeys: Sequence[str] = (),
    min_witnesses: int = 0,
    earlier_checkpoint: str | None = None,
) -> list[str]:
    """The problems found, one line each naming what is wrong; none: the bundle verifies."""
    vkey, note = (Path(bundle, name).read_text() for name in ("log.vkey", "checkpoint"))
    out = [] if signed(note, vkey) else ["checkpoint: no signature by the log key verifies"]
    if (good := sum(signed(note, k, b"\x04") for k in witness_vkeys)) < min_witnesses:
        out.append(f"checkpoint: {good} witness cosignatures verify, {min_witnesses} required")
    jwks = {k["kid"]: k for k in json.loads(Path(bundle, "jwks.json").read_text())["keys"]}
    rows = [json.loads(line) for line in Path(bundle, "entries.jsonl").read_text().splitlines()]
    size, root = int(note.split("\n")[1]), b64decode(note.split("\n")[2])
    if [e["index"] for e in rows] != list(range(size - len(rows), size)):
        out.append(f"entries: indices not contiguous up to the checkpoint's size, {size}")
    for e in rows:
        name, obj = f"{e['kind']} {e['id']} (leaf {e['index']})", Path(bundle, str(e["object"]))
        leaf = [sha256(b"\x00" + bytes.fromhex(e["leaf"])).digest()]
        if not (e["index"] < size and climb(e["index"], size - 1, e["proof"], leaf, [root])):
            out.append(f"{name}: inclusion proof does not verify against the checkpoint")
        if e["object"] is None or ".." in obj.parts or not obj.is_file():
            out.append(f"{name}: object missing ({e.get('missing', 'no file')})")
        elif sha256(obj.read_bytes()).hexdigest() != e["leaf"]:
            out.append(f"{name}: digest does not match the log")
        elif e["kind"] == "manifest" and not jws_ok(json.loads(obj.read_bytes()), jwks):
            out.append(f"{name}: manifest signature does not verify with jwks.json")
    given = json.loads(c.read_text()) if (c := Path(bundle, "consistency.json")).exists() else {}
    if earlier := earlier_checkpoint or given.get("from_checkpoint"):
        _, m, old = earlier.split("\n")[:3]
        if not signed(earlier, vkey):
            out.append("earlier checkpoint: no signature by the log key verifies")
        if not consistent(int(m), size, b64decode(old), root, given.get("proof", [])):
            out.append(f"checkpoint ({size} leaves) not consistent with the earlier one ({m})")
    return out
