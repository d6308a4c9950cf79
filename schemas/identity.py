"""Which execution an input is about: one ``ExecutionRef``, nested in every input of the
``ExecuteCapability`` workflow and its activities, and in the start's signed claims.

An input of the flat shape (the ref's fields side by side with its own), which the
histories of open runs hold, is read by ``nest_ref`` into the same model.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class Submission(BaseModel):
    """The request an execution answers, as the gateway received it: labels for its intake
    event (``SIGNAL_RECEIVED``), never part of what a start vouches for."""

    submitted_at: datetime
    request_id: str
    trace_id: str


class ExecutionRef(BaseModel):
    """One execution: the tenant's call under an idempotency key, and the run doing it.
    What a step did not know yet stays at its default (a start has no run id)."""

    tenant_id: str
    receipt_id: str = ""
    idempotency_key: str = Field(
        default="", description="The caller's key (or the canonical payload's hash)."
    )
    input_hash: str = Field(default="", description="SHA-256 of the redacted input (JCS).")
    workflow_id: str = ""
    run_id: str = ""
    is_synthetic: bool = Field(default=False, description="A synthetic probe's run.")
    connection_id: str | None = None
    submission: Submission | None = Field(
        default=None,
        description="The start's request (``ExecuteWorkflowInput`` sets it from its own "
        "labels); None in a ref read from a history written before it.",
    )


REF_FIELDS = tuple(ExecutionRef.model_fields)


def nest_ref(data: Any, fields: Iterable[str] = REF_FIELDS) -> Any:
    """``data`` in the shape with a ``ref``: an input of the flat shape (its identity fields
    among its own) gets ``fields`` moved into one. Anything else is left to validation."""
    if not isinstance(data, dict) or "ref" in data:
        return data
    moved = {name: data[name] for name in fields if name in data}
    rest = {name: value for name, value in data.items() if name not in moved}
    return {**rest, "ref": moved}
