"""Plans: several tool calls as one durable run (``POST /v1/plans``).

A plan is an ordered list of steps, each one capability call that runs as an execution of
its own (key ``<plan key>/<step id>``), so each keeps every guarantee an execution has. A
step's input may use what an earlier step answered through references
``${steps.<id>.output.<path>}``: a string that is exactly one reference takes the value
with its JSON type; references inside longer text are replaced by the value as text. There
are no expressions and no code: a path names object members and list positions only.

Pure and free of I/O: the gateway checks a plan at ingest, the workflow resolves its
references as steps finish, with the same functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.approvals import ApprovalRef
from schemas.execute import MAX_IDEMPOTENCY_KEY_LENGTH, ErrorBody
from schemas.redaction import redacted_hash

MAX_STEPS = 20
STEP_ID_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
# ``${steps.<id>.output}`` or ``${steps.<id>.output.<path>}``; a path is member names and
# list positions joined by dots.
REFERENCE = re.compile(r"\$\{steps\.([a-z][a-z0-9_-]{0,39})\.output((?:\.[A-Za-z0-9_-]+)*)\}")
# Anything that looks like a reference, to refuse malformed ones rather than pass them on.
REFERENCE_LIKE = re.compile(r"\$\{[^}]*\}?")
# A plan's key and its step keys share the key space of executions; a step's key adds
# ``/<step id>`` (at most 40 characters) and, for a retry or a compensation, a suffix.
MAX_PLAN_KEY_LENGTH = MAX_IDEMPOTENCY_KEY_LENGTH - 64


class StepStatus(StrEnum):
    PENDING = "pending"
    EXECUTED = "executed"
    FAILED = "failed"
    SKIPPED = "skipped"
    COMPENSATED = "compensated"


class PlanStatus(StrEnum):
    ACCEPTED = "accepted"
    PLANNED = "planned"
    EXECUTED = "executed"
    FAILED = "failed"


class OnFailure(StrEnum):
    STOP = "stop"
    COMPENSATE = "compensate"


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    capability_id: str = Field(min_length=1, max_length=200)
    capability_version: str | None = Field(default=None, max_length=50)
    connection_id: str | None = Field(default=None, max_length=200)
    input: dict[str, Any]


class Compensation(_Call):
    """The call that undoes a completed step; it may use the step's own output."""


class When(BaseModel):
    """Run the step only if ``step`` (an earlier one) ended in one of ``status``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    step: str = Field(pattern=STEP_ID_PATTERN)
    status: list[Annotated[StepStatus, Field(strict=False)]] = Field(min_length=1)

    @field_validator("status", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


class PlanStep(_Call):
    id: str = Field(pattern=STEP_ID_PATTERN, description="Unique in the plan.")
    when: When | None = None
    compensate: Compensation | None = None


class PlanRequest(BaseModel):
    """Body of ``POST /v1/plans``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: str = Field(description='Request schema version; "1".')
    steps: list[PlanStep] = Field(min_length=1, max_length=MAX_STEPS)
    on_failure: OnFailure = Field(
        default=OnFailure.STOP,
        strict=False,
        description="`stop`: the plan ends failed at the failing step. `compensate`: each "
        "executed step that declares `compensate` is undone, in reverse order.",
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_PLAN_KEY_LENGTH)
    dry_run: bool = Field(
        default=False,
        description="Check every step's policy and references only: nothing runs, the key "
        "is not taken. Answers status 'planned'.",
    )

    @model_validator(mode="after")
    def _unique_ids(self) -> PlanRequest:
        seen: set[str] = set()
        for step in self.steps:
            if step.id in seen:
                raise ValueError(f"step id {step.id!r} is used twice")
            seen.add(step.id)
        return self

    def document(self) -> dict[str, Any]:
        """What the plan does, as written: its steps and failure rule (no key, no dry run)."""
        return {
            "steps": [s.model_dump(mode="json", exclude_none=True) for s in self.steps],
            "on_failure": self.on_failure.value,
        }


def plan_hash(document: Mapping[str, Any]) -> str:
    """The plan's digest: of its redacted canonical document, as an execution's input
    hash is of its redacted input. Repeats of a key are compared by it, and an approval of
    the whole plan binds it."""
    return redacted_hash(dict(document))


# References.


class Problem(BaseModel):
    """Why a plan is invalid: which step (and which part of it), and what is wrong."""

    step: str
    where: str = Field(description="`input`, `when`, `compensate.input`, ...")
    reference: str | None = None
    message: str


def references(value: Any) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """Every reference in ``value``: its text, the step it names and the output path."""
    if isinstance(value, str):
        for match in REFERENCE.finditer(value):
            path = tuple(p for p in match.group(2).split(".") if p)
            yield match.group(0), match.group(1), path
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from references(item)
    elif isinstance(value, list):
        for item in value:
            yield from references(item)


def malformed(value: Any) -> Iterator[str]:
    """Text that looks like a reference (``${...}``) and is not one."""
    if isinstance(value, str):
        for match in REFERENCE_LIKE.finditer(value):
            if not REFERENCE.fullmatch(match.group(0)):
                yield match.group(0)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from malformed(item)
    elif isinstance(value, list):
        for item in value:
            yield from malformed(item)


class Unresolved(LookupError):
    """A reference whose value is not there (a skipped step, a path the output lacks)."""

    def __init__(self, reference: str, why: str) -> None:
        super().__init__(f"{reference}: {why}")
        self.reference = reference
        self.why = why


def lookup(output: Any, path: Sequence[str], reference: str) -> Any:
    """The value at ``path`` in ``output``; raises ``Unresolved``."""
    value = output
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise Unresolved(reference, f"the output has no {part!r} there")
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def resolve(value: Any, outputs: Mapping[str, Any]) -> Any:
    """``value`` with every reference replaced by what it names in ``outputs`` (step id →
    output of a step that executed). Raises ``Unresolved`` for a step not in ``outputs``
    or a path its output lacks."""
    if isinstance(value, str):
        whole = REFERENCE.fullmatch(value)
        if whole is not None:
            return _value_of(whole, outputs)
        return REFERENCE.sub(lambda m: _as_text(_value_of(m, outputs)), value)
    if isinstance(value, Mapping):
        return {k: resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, outputs) for v in value]
    return value


def _value_of(match: re.Match[str], outputs: Mapping[str, Any]) -> Any:
    step = match.group(1)
    if step not in outputs:
        raise Unresolved(match.group(0), f"step {step!r} did not execute")
    path = [p for p in match.group(2).split(".") if p]
    return lookup(outputs[step], path, match.group(0))


def placeholder(value: Any) -> Any:
    """``value`` with each whole-string reference replaced by None and each embedded one
    by text: what a step's input schema is checked against before references resolve
    (a field whose value is one reference is checked only once it resolves)."""
    if isinstance(value, str):
        if REFERENCE.fullmatch(value):
            return None
        return REFERENCE.sub("x", value)
    if isinstance(value, Mapping):
        return {k: placeholder(v) for k, v in value.items()}
    if isinstance(value, list):
        return [placeholder(v) for v in value]
    return value


def whole_references(value: Any, loc: tuple[str | int, ...] = ()) -> set[tuple[str | int, ...]]:
    """Where in ``value`` a string is exactly one reference (its location)."""
    if isinstance(value, str):
        return {loc} if REFERENCE.fullmatch(value) else set()
    found: set[tuple[str | int, ...]] = set()
    if isinstance(value, Mapping):
        for k, v in value.items():
            found |= whole_references(v, (*loc, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found |= whole_references(v, (*loc, i))
    return found


def when_holds(when: When | None, statuses: Mapping[str, StepStatus]) -> bool:
    """Whether a step with ``when`` runs, given the statuses of the steps before it."""
    return when is None or statuses.get(when.step) in when.status


# Keys.


def step_key(plan_key: str, step_id: str, attempt: int = 0) -> str:
    """The idempotency key of a step's execution: ``<plan key>/<step id>``, and
    ``…#<n>`` for its n-th retry after a resume (a failed attempt keeps its receipt)."""
    key = f"{plan_key}/{step_id}"
    return key if attempt == 0 else f"{key}#{attempt}"


def compensation_key(plan_key: str, step_id: str) -> str:
    """The idempotency key of the execution that undoes a step."""
    return f"{plan_key}/{step_id}/compensate"


# The answer.


class StepState(BaseModel):
    """One step of a plan as it stands."""

    id: str
    status: StepStatus = StepStatus.PENDING
    capability_id: str
    receipt_id: str | None = None
    idempotency_key: str | None = None
    attempt: int = Field(default=0, description="Retries after a resume (0: the first).")
    error: ErrorBody | None = None
    decision: dict[str, Any] | None = Field(
        default=None, description="A dry run's policy decision for the step."
    )
    compensation_receipt_id: str | None = None
    compensation_error: ErrorBody | None = None


class PlanStepAnswer(BaseModel):
    id: str
    status: StepStatus
    capability_id: str
    receipt_id: str | None = None
    output: Any = None
    error: ErrorBody | None = None
    decision: dict[str, Any] | None = None
    compensation_receipt_id: str | None = None


class PlanEnvelope(BaseModel):
    """Every answer of the plans API."""

    plan_id: str
    status: PlanStatus
    steps: list[PlanStepAnswer]
    trace_id: str
    idempotency_key: str | None = None
    workflow_id: str | None = None
    replayed: bool = False
    error: ErrorBody | None = None
    approval: ApprovalRef | None = None
    on_failure: Literal["stop", "compensate"] = "stop"


class ResumeRequest(BaseModel):
    """Body of ``POST /v1/plans/{plan_id}/resume``: the operator's statement, as a dead
    letter's requeue takes it. The failed step runs again under a new key (a new downstream
    key too), which only cannot double its effect when that effect did not happen."""

    model_config = ConfigDict(extra="forbid")

    effect_did_not_happen: bool = Field(
        default=False,
        description="The operator states the failed step's effect did not take place.",
    )
    note: str = Field(default="", max_length=2000)


class CancelRequest(BaseModel):
    """Body of ``POST /v1/plans/{plan_id}/cancel``: why (optional). A step already calling
    its provider finishes; no later step starts."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(default="", max_length=2000)


class PlanSummary(BaseModel):
    """A plan in a list: where it stands, without its steps' outputs."""

    plan_id: str
    status: PlanStatus
    idempotency_key: str | None = None
    steps: dict[StepStatus, int] = Field(description="How many steps are in each status.")
    error_code: str | None = None
    created_at: datetime
    updated_at: datetime


class PlanList(BaseModel):
    items: list[PlanSummary]
    next_cursor: str | None = Field(
        default=None,
        description="Opaque cursor of the next page (pass it as `cursor`); null on the last.",
    )
