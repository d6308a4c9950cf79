"""The manifest step: a signed, write-once run manifest at the end of every run.

Written to ``{root}/{tenant}/{run_id}/manifest.json``, indexed in Postgres with its digest
in the same transaction as the ``MANIFEST_WRITTEN`` event. A replayed run (reset, or a new
run answering from a stored receipt) gets its own manifest, marked ``replayed`` and
pointing at the original; the original is never touched.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.evidence import Chain, start_chain
from schemas.approvals import ApprovalStatus
from schemas.canonical import sha256_digest
from schemas.events import AggregateType, EventType
from schemas.manifest import (
    Approval,
    Artifact,
    ManifestMetadata,
    RunManifest,
    parse_document,
    redact_manifest,
    redacted_tool,
)
from schemas.names import WRITE_MANIFEST
from schemas.provider_evidence import ProviderEvidence
from schemas.records import OUTCOME_UNKNOWN
from schemas.run import ManifestInput, ManifestRef
from schemas.webhooks import compensating_action_ref
from store import manifests, tenancy
from store.keyrings.signing import Keyring, sign_manifest
from store.manifests import IndexRow, ManifestStore, Staged
from store.models import ManifestRow

_MANIFEST_NAMESPACE = uuid.UUID("9b2e4c1a-7f3d-4e8b-a6c5-1d0f2e3b4a59")


def _stamp(path: Path) -> tuple[int, int, int]:
    """What changes when the file is replaced: an atomic rename or a Kubernetes secret
    update (a symlink swapped to a new file) gives a new inode even within one mtime tick."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


@dataclass(frozen=True)
class Ready:
    """A run's manifest ready to index: stored already, or ``staged`` to publish first."""

    signed: RunManifest
    path: Path
    digest: str
    staged: Staged | None = None


class Staging:
    """A run's manifest being made ready beside the caller's transaction
    (``ManifestActivities.staging``): ``published`` once the caller knows it is the run's
    to store, ``close`` in any case (a staged file never published is removed)."""

    def __init__(
        self,
        inp: ManifestInput,
        ready: asyncio.Future[Ready],
        store: ManifestStore,
        *,
        unrecorded: bool = False,
    ) -> None:
        self.input = inp
        self._ready = ready
        self._store = store
        self._unrecorded = unrecorded
        self._done = False

    async def published(self) -> Ready:
        """The manifest stored (write-once), with its path and the digest of its bytes."""
        ready = await self._ready
        self._done = True
        if ready.staged is not None:
            publish = functools.partial(self._store.publish, replace_unrecorded=self._unrecorded)
            await asyncio.to_thread(publish, ready.staged)
        return ready

    async def close(self) -> None:
        """Remove what was staged and not published."""
        if self._done:
            return
        self._done = True
        try:
            ready = await self._ready
        except Exception:
            return  # nothing staged (the failure is the publisher's to report)
        if ready.staged is not None:
            self._store.discard(ready.staged)


class ManifestActivities:
    """Built once in ``worker.py`` with the store, the keyring and the sessionmaker."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], store: ManifestStore, keyring: Keyring
    ) -> None:
        self._sessions = sessions
        self._store = store
        self._keyring = keyring
        self._keyring_stamp = _stamp(keyring.path)
        self._worker_id = socket.gethostname()

    def _current_keyring(self) -> Keyring:
        """Pick up ``moat signing-key rotate`` (or an updated secret mount) without a restart."""
        stamp = _stamp(self._keyring.path)
        if stamp != self._keyring_stamp:
            self._keyring, self._keyring_stamp = Keyring.load(self._keyring.path), stamp
        return self._keyring

    @activity.defn(name=WRITE_MANIFEST)
    async def write_manifest(self, inp: ManifestInput) -> ManifestRef:
        receipt = inp.receipt
        if not inp.replayed and inp.run_id != receipt.run_id:
            # The receipt was recorded by another run of this workflow: this run is a reset
            # re-running the manifest step, and repeats nothing.
            inp = inp.model_copy(
                update={
                    "replayed": True,
                    "replay_reason": "workflow_reset",
                    "tool": None,
                    "dead_lettered": False,
                }
            )
        signed, path, digest = await self.stored_or_written(inp)
        async with self._sessions.begin() as session:
            chain = await start_chain(
                session, receipt.tenant_id, receipt.id, inp.run_id, "moat.manifest"
            )
            ref = await self.index(session, inp, chain, signed, path, digest)
            await chain.append(session)
        return ref

    async def stored_or_written(self, inp: ManifestInput) -> tuple[RunManifest, Path, str]:
        """The run's manifest, signed and stored (write-once), with its path and the digest
        of its bytes; a retried attempt finds the one the first stored."""
        ready = await self.staging(inp).published()
        return ready.signed, ready.path, ready.digest

    async def make_folder(self, tenant_id: str, run_id: str) -> None:
        """The run's folder made ahead of its manifest (``ManifestStore.make_folder``)."""
        await asyncio.to_thread(self._store.make_folder, tenant_id, run_id)

    def staging(self, inp: ManifestInput, *, unrecorded: bool = False) -> Staging:
        """The run's manifest made ready (found stored, or signed and staged) from now on,
        in a thread beside the caller's work, to be published or discarded later.

        ``unrecorded``: for the transaction that records the receipt, which publishes only
        once it knows the receipt is new. A manifest stored for the run then belongs to an
        attempt that died before its commit (a retried adapter attempt's may describe
        another call of the provider): this one is signed and staged all the same, and
        replaces it (``ManifestStore.publish``)."""
        ready = asyncio.ensure_future(self._ready(inp, reuse=not unrecorded))
        return Staging(inp, ready, self._store, unrecorded=unrecorded)

    async def _ready(self, inp: ManifestInput, *, reuse: bool = True) -> Ready:
        original = None
        if inp.replayed:
            receipt = inp.receipt
            async with self._sessions.begin() as session:
                await tenancy.set_tenant(session, receipt.tenant_id)
                original = await manifests.index_row(session, receipt.tenant_id, receipt.run_id)
        return await asyncio.to_thread(self._ready_now, inp, original, reuse)

    def _ready_now(self, inp: ManifestInput, original: ManifestRow | None, reuse: bool) -> Ready:
        """The run's stored manifest when it is this receipt's (a retried attempt) and may
        be ``reuse``d, else a new one signed and staged (blocking: file reads, signing,
        fsync)."""
        receipt = inp.receipt
        stored = self._stored(receipt.tenant_id, inp.run_id) if reuse else None
        if stored is not None and stored[0].correlation_id == receipt.id:
            signed, digest = stored
            return Ready(signed, self._store.path_for(receipt.tenant_id, inp.run_id), digest)
        signed = sign_manifest(self._build(inp, original), self._current_keyring(), signer="moat")
        staged = self._store.stage(signed)
        return Ready(signed, staged.path, sha256_digest(staged.data), staged)

    async def index(
        self,
        session: AsyncSession,
        inp: ManifestInput,
        chain: Chain,
        signed: RunManifest,
        path: Path,
        digest: str,
    ) -> ManifestRef:
        """The manifest's index row, and its events added to ``chain`` (the caller appends
        them) when the row is new, in the caller's transaction."""
        signature = signed.signatures[-1]
        kid = signature.kid or ""
        await _index(session, inp, chain, str(path), digest, kid, signature.algorithm)
        return ManifestRef(path=str(path), sha256=digest, kid=kid)

    def new_index(
        self, inp: ManifestInput, chain: Chain, signed: RunManifest, path: Path, digest: str
    ) -> tuple[str, dict[str, Any]]:
        """``index`` for a manifest whose row cannot be there yet (its receipt was written
        in the same transaction), as a statement to send with the transaction's others
        (``store.manifests.new_index``: it fails when the row is there); its events are
        added to ``chain``."""
        signature = signed.signatures[-1]
        kid = signature.kid or ""
        row = _index_row(inp, str(path), digest, kid, signature.algorithm)
        _indexed(chain, inp, digest, kid)
        return manifests.new_index(**row)

    def _stored(self, tenant_id: str, run_id: str) -> tuple[RunManifest, str] | None:
        """The run's stored manifest and the digest of its bytes, if there is one."""
        try:
            data = self._store.read(tenant_id, run_id)
        except FileNotFoundError:
            return None
        return RunManifest.model_validate(parse_document(data)), sha256_digest(data)

    def _build(self, inp: ManifestInput, original: ManifestRow | None) -> RunManifest:
        receipt = inp.receipt
        now = datetime.now(UTC)
        outputs: dict[str, Any] = {
            "receipt_id": receipt.id,
            "status": receipt.status.value,
            "output_hash": receipt.output_hash,
            "http_status": receipt.http_status,
            "error_code": receipt.error_code,
        }
        tools = []
        artifacts = []
        extra: dict[str, Any] = {}
        if inp.replayed:
            outputs.update(
                replayed_from=receipt.run_id,
                note="Replayed from the stored receipt; no side effect repeated",
            )
            extra = {"replay_reason": inp.replay_reason, "original_run_id": receipt.run_id}
            if original is not None:
                artifacts.append(
                    Artifact(
                        artifact_id=f"manifest:{original.run_id}",
                        type="file",
                        location=original.path,
                        checksum=original.sha256,
                        created_at=original.created_at,
                        metadata={
                            "note": "Manifest of the original run",
                            "original_run_id": original.run_id,
                        },
                    )
                )
        elif inp.tool is not None:
            tool = inp.tool
            tools.append(
                redacted_tool(
                    tool.tool_name,
                    tool.invoked_at,
                    tool.parameters,
                    "success" if tool.status == "success" else "failure",
                    data=tool.data,
                    error=tool.error,
                    idempotency_token=tool.idempotency_token,
                )
            )
            if receipt.provider_evidence is not None:
                artifacts.append(_evidence_artifact(receipt.provider_evidence, tool.invoked_at))
        if receipt.is_synthetic:
            extra["synthetic"] = True  # a probe's run, kept out of real traffic's numbers
        unknown = receipt.error_code == OUTCOME_UNKNOWN and not inp.replayed
        if inp.dead_lettered or unknown:
            outputs["compensating_action_ref"] = compensating_action_ref(receipt.id)
            extra["dlq_entry"] = True
        if unknown:
            outputs["outcome_unknown"] = True
            outputs["note"] = (
                "The provider may or may not have performed the effect and it could not be "
                "looked up; it was not retried. A person checks the provider and decides."
            )
        attempts = inp.tool.attempts if inp.tool is not None and not inp.replayed else 1
        return redact_manifest(
            RunManifest(
                run_id=inp.run_id,
                tenant_id=receipt.tenant_id,
                idempotency_key=receipt.idempotency_key,
                trace_id=receipt.trace_id,
                correlation_id=receipt.id,
                inputs_sha=receipt.input_hash,
                executed_at=now if inp.replayed else receipt.timestamp,
                attempt=max(0, attempts - 1),
                replayed=inp.replayed,
                tools=tools,
                artifacts=artifacts,
                outputs=outputs,
                signatures=[],
                policy_mode=inp.policy_mode,
                approvals=_approvals(inp),
                metadata=ManifestMetadata(
                    message_id=receipt.request_id,
                    priority=5,
                    submitted_at=inp.submitted_at,
                    execution_duration_ms=receipt.latency_ms,
                    worker_id=self._worker_id,
                    **{k: v for k, v in extra.items() if v is not None},
                ),
            )
        )


def _approvals(inp: ManifestInput) -> list[Approval]:
    """Who approved which digest when; a run that waited and was not approved has none."""
    decided = inp.approval
    if decided is None or decided.status != ApprovalStatus.APPROVED or decided.decided_at is None:
        return []
    return [
        Approval(
            approver=decided.decided_by or "",
            approved_at=decided.decided_at,
            approval_type="manual",
            reason=decided.comment or None,
            approved_digest=decided.approved_digest,
            policy_version=decided.policy_version,
        )
    ]


async def _index(
    session: AsyncSession,
    inp: ManifestInput,
    chain: Chain,
    path: str,
    digest: str,
    kid: str,
    alg: str,
) -> None:
    if await manifests.index(session, **_index_row(inp, path, digest, kid, alg)):
        _indexed(chain, inp, digest, kid)


def _index_row(inp: ManifestInput, path: str, digest: str, kid: str, alg: str) -> IndexRow:
    receipt = inp.receipt
    return {
        "id": str(uuid.uuid5(_MANIFEST_NAMESPACE, f"{receipt.id}|{inp.run_id}")),
        "tenant_id": receipt.tenant_id,
        "receipt_id": receipt.id,
        "run_id": inp.run_id,
        "path": path,
        "sha256": digest,
        "kid": kid,
        "alg": alg,
        "replayed": inp.replayed,
        "outcome": receipt.status.value,
    }


def _indexed(chain: Chain, inp: ManifestInput, digest: str, kid: str) -> None:
    """The events of a manifest newly indexed."""
    receipt = inp.receipt
    if inp.replayed:
        chain.add(
            EventType.RUN_REPLAYED,
            AggregateType.RUN,
            receipt.id,
            reason=inp.replay_reason,
            original_run_id=receipt.run_id,
        )
    chain.add(
        EventType.MANIFEST_WRITTEN,
        AggregateType.MANIFEST,
        f"{receipt.id}:{inp.run_id}",
        sha256=digest,
        kid=kid,
        replayed=inp.replayed,
    )


def _evidence_artifact(evidence: ProviderEvidence, at: datetime) -> Artifact:
    """What the call left at the provider (the receipt's ``provider_evidence``): the object
    made or changed (``state_change``), or the answer an HTTP call got (``api_response``)."""
    kind: Literal["state_change", "api_response"] = (
        "api_response" if evidence.object_type == "response" else "state_change"
    )
    name = f"{evidence.provider}:{evidence.object_id or evidence.object_type}"
    return Artifact(
        artifact_id=name,
        type=kind,
        location=evidence.permalink or name,
        checksum=evidence.response_sha256,
        created_at=at,
        metadata=evidence.model_dump(mode="json", exclude_none=True),
    )
