"""Checking an evidence bundle offline (docs/transparency-log.md, "The evidence bundle"):
the log's signature on its checkpoint, the witnesses' cosignatures, every entry's object
digest, inclusion proof and (for a manifest) JWS signature, the indices' continuity, and
consistency with an earlier checkpoint. Nothing is fetched. Each problem is one line
naming what it is about; the entries are read one at a time, never all at once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.translog import (
    Checkpoint,
    NoteError,
    Verifier,
    cosignatures_by,
    from_hex,
    leaf_hash,
    parse_checkpoint,
    parse_vkey,
    root_of,
    split_note,
    verify_consistency,
    verify_inclusion,
    verify_note,
)

EXPIRED = "expired by retention"


class BundleUnreadable(ValueError):
    """The bundle (or a file given with it) cannot be read as one: nothing was checked."""


@dataclass
class Report:
    checkpoint: Checkpoint
    problems: list[str] = field(default_factory=list)
    first: int | None = None
    entries: int = 0
    manifests: int = 0
    receipts: int = 0
    expired: int = 0
    witnesses: list[str] = field(default_factory=list)
    earlier: int | None = None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise BundleUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None


def _vkey(text: str, where: str) -> Verifier:
    try:
        return parse_vkey(text)
    except NoteError as exc:
        raise BundleUnreadable(f"{where} is not a verifier key: {exc}") from None


def signed_checkpoint(note: str, log: Verifier, what: str, problems: list[str]) -> Checkpoint:
    """The checkpoint of ``note``; a problem when the log's signature does not verify."""
    try:
        body = verify_note(note, log)
    except NoteError:
        problems.append(f"{what}: log signature does not verify with log.vkey")
        try:
            body, _ = split_note(note)
        except NoteError as exc:
            raise BundleUnreadable(f"{what} is not a signed note: {exc}") from None
    try:
        checkpoint = parse_checkpoint(body)
    except NoteError as exc:
        raise BundleUnreadable(f"{what} is not a checkpoint: {exc}") from None
    if checkpoint.origin != log.name:
        problems.append(f"{what}: origin {checkpoint.origin} is not the log key's {log.name}")
    return checkpoint


def check_witnesses(
    bundle: Path, note: str, given: list[str], minimum: int, report: Report
) -> None:
    """Each given witness must have cosigned; without any given, the bundle's
    ``witnesses/*.vkey`` count towards ``minimum``, none required of them alone."""
    named = [(vkey, f"--witness {vkey}") for vkey in given]
    if not given:
        files = sorted((bundle / "witnesses").glob("*.vkey"))
        named = [(_read(path), f"witnesses/{path.name}") for path in files]
    for vkey, where in named:
        witness = _vkey(vkey, where)
        if cosignatures_by(note, witness):
            report.witnesses.append(witness.name)
        elif given:
            report.problems.append(f"checkpoint: no valid cosignature of witness {witness.name}")
    if len(report.witnesses) < minimum:
        report.problems.append(
            f"witnesses: {len(report.witnesses)} of {minimum} required cosignatures verify"
        )


def _entries(bundle: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    path = bundle / "entries.jsonl"
    try:
        with path.open() as lines:
            for number, line in enumerate(lines, 1):
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = None
                yield number, entry if isinstance(entry, dict) else None
    except OSError as exc:
        raise BundleUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None


def check_entry(
    bundle: Path, entry: dict[str, Any], root: Checkpoint, jwks: dict[str, Any]
) -> tuple[list[str], bytes | None]:
    """The problems of one entry, and its leaf data when it names one."""
    kind, index = entry.get("kind"), entry.get("index")
    name = f"{kind} {entry.get('id')} (leaf {index})"
    try:
        leaf = from_hex(str(entry.get("leaf")))
        proof = [from_hex(str(h)) for h in entry.get("proof") or []]
    except NoteError:
        return [f"{name}: leaf or proof is not hex"], None
    problems = []
    if not verify_inclusion(leaf_hash(leaf), int(index or 0), root.size, proof, root.root):
        problems.append(f"{name}: inclusion proof does not verify")
    if entry.get("missing") == EXPIRED and entry.get("object") is None:
        return problems, leaf
    data = _object(bundle, entry.get("object"))
    if data is None:
        problems.append(f"{name}: object missing ({entry.get('missing') or 'not in the bundle'})")
    elif hashlib.sha256(data).digest() != leaf:
        problems.append(f"{name}: digest does not match the log")
    elif kind == "manifest":
        # Loaded with the first manifest: the JWS checks pull in the signing keyring's code.
        from starter.cli.manifests import VALID, check_manifest

        code, message = check_manifest(data, jwks)
        if code != VALID:
            problems.append(f"{name}: signature does not verify with jwks.json: {message}")
    return problems, leaf


def _object(bundle: Path, relative: Any) -> bytes | None:
    if not isinstance(relative, str) or relative.startswith("/") or ".." in relative:
        return None
    try:
        return (bundle / relative).read_bytes()
    except OSError:
        return None


def check_entries(bundle: Path, report: Report, jwks: dict[str, Any]) -> list[bytes] | None:
    """Every entry checked; the leaf data of the whole tree when the bundle starts at 0."""
    size, expected = report.checkpoint.size, None
    leaves: list[bytes] | None = []
    for number, entry in _entries(bundle):
        index = entry.get("index") if entry else None
        if entry is None or not isinstance(index, int) or entry.get("kind") not in KINDS:
            report.problems.append(f"entries.jsonl line {number}: not an entry")
            leaves = None
            continue
        if expected is None:
            expected, report.first = index, index
            leaves = leaves if index == 0 else None
        if index != expected:
            report.problems.append(_gap(expected, index, report))
            leaves = None
        expected = index + 1
        problems, leaf = check_entry(bundle, entry, report.checkpoint, jwks)
        report.problems += problems
        _count(report, entry)
        if leaves is not None and leaf is not None:
            leaves.append(leaf)
    if expected is None:
        return [] if size == 0 else None  # nothing exported: no entry to check
    if expected < size:
        report.problems.append(_gap(expected, size, report))
    elif expected > size:
        report.problems.append(f"entries: leaf {expected - 1} is beyond the tree's size {size}")
    return leaves if leaves is not None and len(leaves) == size else None


KINDS = ("manifest", "receipt")


def _gap(expected: int, found: int, report: Report) -> str:
    first = report.first if report.first is not None else expected
    missing = f"leaf {expected}" if found == expected + 1 else f"leaves {expected}-{found - 1}"
    if found < expected:
        missing = f"leaf {found} out of order"
    return (
        f"entries: {missing} absent (indices must run from {first} to {report.checkpoint.size - 1})"
    )


def _count(report: Report, entry: dict[str, Any]) -> None:
    report.entries += 1
    report.manifests += entry.get("kind") == "manifest"
    report.receipts += entry.get("kind") == "receipt"
    report.expired += entry.get("missing") == EXPIRED and entry.get("object") is None


def check_consistency(
    earlier: Checkpoint, proof: list[bytes] | None, leaves: list[bytes] | None, report: Report
) -> None:
    """``earlier`` extends to the bundle's checkpoint: with ``proof`` (consistency of its
    size into the checkpoint), else from the bundle's own leaves when it holds the whole
    tree."""
    current, report.earlier = report.checkpoint, earlier.size
    said = f"consistency: checkpoint of size {earlier.size} is not consistent with size "
    if earlier.origin != current.origin or earlier.size > current.size:
        report.problems.append(said + str(current.size))
        return
    if proof is None and leaves is not None:
        hashes = [leaf_hash(leaf) for leaf in leaves[: earlier.size]]
        consistent = root_of(hashes) == earlier.root
    elif proof is not None:
        consistent = verify_consistency(
            earlier.size, current.size, proof, earlier.root, current.root
        )
    else:
        report.problems.append(
            f"consistency: the bundle holds no proof from size {earlier.size} (export with "
            f"--since {earlier.size}, or from 0)"
        )
        return
    if not consistent:
        report.problems.append(said + str(current.size))


def _jwks(bundle: Path) -> dict[str, Any]:
    try:
        value = json.loads(_read(bundle / "jwks.json"))
    except ValueError as exc:
        raise BundleUnreadable(f"jwks.json is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BundleUnreadable("jwks.json is not a JWK Set")
    return value


def _bundled_consistency(bundle: Path) -> tuple[str, list[bytes]] | None:
    path = bundle / "consistency.json"
    if not path.exists():
        return None
    try:
        value = json.loads(_read(path))
        return str(value["from_checkpoint"]), [from_hex(str(h)) for h in value["proof"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleUnreadable(f"consistency.json is not a consistency proof: {exc}") from None


def verify_bundle(
    bundle: Path, earlier_file: Path | None, witnesses: list[str], minimum: int
) -> Report:
    """Every check of the bundle; ``BundleUnreadable`` when it cannot be read as one."""
    log = _vkey(_read(bundle / "log.vkey"), "log.vkey")
    note = _read(bundle / "checkpoint")
    problems: list[str] = []
    report = Report(signed_checkpoint(note, log, "checkpoint", problems), problems)
    check_witnesses(bundle, note, witnesses, minimum, report)
    leaves = check_entries(bundle, report, _jwks(bundle))
    bundled = _bundled_consistency(bundle)
    earlier = _read(earlier_file) if earlier_file is not None else None
    if earlier is None and bundled is not None:
        earlier = bundled[0]
    if earlier is not None:
        proof_size = None
        if bundled is not None:
            proof_size = signed_checkpoint(bundled[0], log, "consistency.json", []).size
        checkpoint = signed_checkpoint(earlier, log, "earlier checkpoint", report.problems)
        proof = bundled[1] if bundled is not None and proof_size == checkpoint.size else None
        check_consistency(checkpoint, proof, leaves, report)
    return report
