"""The contracts of the transparency log's checkpoint job (workflow ``LogCheckpoint``,
activity ``moat.log_checkpoint``): sequence every tenant's waiting leaves and sign a
checkpoint of each log that grew."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LogCheckpointInput(BaseModel):
    tenant_id: str | None = Field(default=None, description="Only this tenant (default: all).")


class LogCheckpointReport(BaseModel):
    tenants: int = Field(description="Tenants looked at.")
    sequenced: int = Field(default=0, description="Leaves given their index.")
    checkpoints: int = Field(default=0, description="New signed checkpoints.")


# --- the log's HTTP answers (hashes as 64 lowercase hex characters) ----------------------

HEX_HASH = r"^[0-9a-f]{64}$"


class InclusionProof(BaseModel):
    leaf_index: int = Field(description="The leaf's position in the tree.")
    tree_size: int = Field(description="The size of the tree the proof is against.")
    leaf: str = Field(description="The leaf data: SHA-256 of the logged object's bytes.")
    proof: list[str] = Field(description="RFC 9162 inclusion path, leaf side first.")


class ConsistencyProof(BaseModel):
    model_config = {"populate_by_name": True}

    from_size: int = Field(alias="from", description="The older tree's size.")
    to_size: int = Field(alias="to", description="The newer tree's size.")
    proof: list[str] = Field(description="RFC 9162 consistency proof.")


class LogEntry(BaseModel):
    index: int
    kind: str = Field(description="`manifest` or `receipt`.")
    id: str = Field(description="The manifest's or receipt's id.")
    leaf: str = Field(description="The leaf data: SHA-256 of the object's bytes.")


class CosignatureIn(BaseModel):
    size: int = Field(ge=1, le=2**62, description="The size of the checkpoint cosigned.")
    line: str = Field(
        max_length=1000,
        description="The witness's cosignature line (cosignature/v1): "
        "`\u2014 <name> <base64(key hash || time || signature)>`.",
    )
    vkey: str = Field(
        max_length=1000, description="The witness's verifier key (`<name>+<hash>+<key>`, 0x04)."
    )


class CosignatureOut(BaseModel):
    size: int
    witness: str = Field(description="The witness's key name.")
    added: bool = Field(description="False when this witness's line was already kept.")


class ManifestProof(InclusionProof):
    manifest_id: str
    checkpoint: str = Field(description="The signed checkpoint note the proof is against.")
