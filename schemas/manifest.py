"""The run manifest: the write-once, signed evidence of one run, and the bytes it signs.

Pure and free of I/O (the workflow sandbox imports it); keys and JWS live in
``store.keyrings.signing``. A signature covers the RFC 8785 bytes of the manifest without its
``signatures`` member, so signatures can be added without changing what others signed,
and anyone can recompute the payload from the file with any JCS implementation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from schemas.canonical import canonical_bytes, sha256_digest
from schemas.records import PolicyMode
from schemas.redaction import redact

Algorithm = Literal["ES256", "RS256"]
MANIFEST_SCOPE = ["manifest"]


class _Part(BaseModel):
    """Frozen, closed to unknown members, and absent (not ``null``) when an optional member
    is unset, as the manifest's optional fields are: a null would be a different signed
    document."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _omit_unset_optionals(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        fields = type(self).model_fields
        return {
            k: v
            for k, v in data.items()
            if not (v is None and k in fields and not fields[k].is_required())
        }


class ToolResult(_Part):
    status: Literal["success", "failure"]
    data: Any = None
    error: str | None = None


class ToolInvocation(_Part):
    """One external tool call of the run; parameters and result data are redacted."""

    tool_name: str
    invoked_at: AwareDatetime
    parameters: dict[str, Any]
    result: ToolResult
    idempotency_token: str | None = None


class Artifact(_Part):
    artifact_id: str
    type: Literal["file", "database", "api_response", "state_change"]
    location: str = Field(description="URI or path.")
    size_bytes: int | None = Field(default=None, ge=0)
    checksum: str | None = None
    created_at: AwareDatetime
    metadata: dict[str, Any] | None = None


class Signature(_Part):
    """One detached JWS over ``signing_input``. Only ``signature`` (which names ``alg`` and
    ``kid`` in its protected header) is cryptographic: ``signer``, ``signed_at`` and
    ``scope`` are labels that no signature covers, because the payload is defined as the
    manifest without ``signatures``."""

    signer: str
    algorithm: Algorithm
    signature: str = Field(description="Compact JWS, detached payload: 'header..signature'.")
    signed_at: AwareDatetime
    scope: list[str]
    kid: str | None = Field(default=None, description="RFC 7638 thumbprint of the key.")


class Approval(_Part):
    approver: str
    approved_at: AwareDatetime
    approval_type: Literal["manual", "automated", "policy"]
    reason: str | None = None
    approved_digest: str | None = Field(
        default=None, description="The input_hash the approver decided on."
    )
    policy_version: int | None = Field(default=None, description="The policy it was under.")


class ManifestMetadata(_Part):
    """Open to extra members (a replay's ``replay_reason``, a dead letter's ``dlq_entry``, ...)."""

    model_config = ConfigDict(extra="allow")

    message_id: str
    priority: int
    submitted_at: AwareDatetime
    execution_duration_ms: int | None = Field(default=None, ge=0)
    worker_id: str | None = None


class RunManifest(_Part):
    """The manifest of one run, every member of the manifest format."""

    run_id: str
    tenant_id: str
    idempotency_key: str
    trace_id: str
    correlation_id: str
    inputs_sha: str
    executed_at: AwareDatetime
    attempt: int = Field(ge=0, description="Retry attempt number, 0-based.")
    replayed: bool
    tools: list[ToolInvocation]
    artifacts: list[Artifact]
    outputs: dict[str, Any]
    signatures: list[Signature]
    policy_mode: PolicyMode
    approvals: list[Approval]
    metadata: ManifestMetadata


def signing_input(manifest: RunManifest | Mapping[str, Any]) -> bytes:
    """RFC 8785 bytes of the manifest without ``signatures``: the JWS payload.

    Given a mapping (a parsed file), the bytes come from it as is, exactly as a third party
    computes them; given a model, from its JSON-mode dump, which is what the store writes.
    Raises ``ValueError`` for values outside I-JSON (e.g. integers beyond 2**53).
    """
    if isinstance(manifest, RunManifest):
        document: dict[str, Any] = manifest.model_dump(mode="json")
    else:
        document = dict(manifest)
    document.pop("signatures", None)
    return canonical_bytes(document)


def content_digest(manifest: RunManifest | Mapping[str, Any]) -> str:
    """``sha256:`` of ``signing_input``: names the signed content, whatever its layout."""
    return sha256_digest(signing_input(manifest))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate member name in a JSON object")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_document(data: bytes) -> dict[str, Any]:
    """A manifest file's JSON object, refusing what parsers disagree on (duplicate names,
    NaN/Infinity, invalid UTF-8), so the bytes we verify are the bytes others read.
    Raises ``ValueError``; the shape is checked by ``RunManifest.model_validate``."""
    value = json.loads(
        data.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant
    )
    if not isinstance(value, dict):
        raise ValueError("a manifest is a JSON object")
    return value


def redacted_tool(
    tool_name: str,
    invoked_at: datetime,
    parameters: Mapping[str, Any],
    status: Literal["success", "failure"],
    data: Any = None,
    error: str | None = None,
    idempotency_token: str | None = None,
) -> ToolInvocation:
    """A ``ToolInvocation`` whose parameters, result data and error are redacted: the
    manifest is kept for years, so no secret may enter it."""
    return ToolInvocation(
        tool_name=tool_name,
        invoked_at=invoked_at,
        parameters=redact(dict(parameters)),
        result=ToolResult(
            status=status,
            data=redact(data),
            error=None if error is None else redact(error),
        ),
        idempotency_token=idempotency_token,
    )


def redact_manifest(manifest: RunManifest) -> RunManifest:
    """The manifest with every free-form value redacted (tool parameters, results and
    errors, outputs, artifact locations and metadata). Identifiers are left alone: the
    key deny-list would otherwise blank e.g. ``idempotency_token``."""
    return manifest.model_copy(
        update={
            "tools": [
                redacted_tool(
                    t.tool_name,
                    t.invoked_at,
                    t.parameters,
                    t.result.status,
                    t.result.data,
                    t.result.error,
                    t.idempotency_token,
                )
                for t in manifest.tools
            ],
            "outputs": redact(manifest.outputs),
            "artifacts": [
                a.model_copy(
                    update={
                        "location": redact(a.location),
                        "metadata": None if a.metadata is None else redact(a.metadata),
                    }
                )
                for a in manifest.artifacts
            ],
        }
    )
