"""Synthetic probes: the rules for adding one (a capability the catalog declares safe to
probe, an input its rule allows, no secret in the input, a connection of the tenant's that
the capability takes), and the Temporal Schedule that runs each. Pause, resume and remove
keep the row and the schedule in step.

A probe's runs carry the authority of whoever set it running (``Lender``): the key that
created or last resumed it, which must hold everything executing the capability needs; its
runs are signed with that key's id and scopes and held to them by the policy step, and stop
when the key is revoked. The operators' CLI lends Moat's own authority (every scope).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

import rfc8785
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession
from temporalio.client import Client

from schemas.canonical import MAX_JSON_DEPTH, canonical_bytes, json_depth
from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.errors import ErrorCode
from schemas.pages import Key
from schemas.probes import ProbeCreate, ProbeInfo
from schemas.quotas import Quota
from schemas.redaction import redact
from schemas.scopes import capability_scopes
from schemas.settings import MoatSettings
from starter.runtime import schedules
from starter.service import connections as connections_service
from starter.service import prefixes, quotas
from starter.service.errors import MoatError, capability_not_found, field_errors
from starter.service.scopes import require_scope
from store import db, probes
from store.models import ProbeRow


@dataclass(frozen=True)
class Lender:
    """Whose authority a probe's runs carry: an API key (its id and scopes), or Moat's own
    for the operators (``OPERATOR``: no key, every scope)."""

    api_key_id: str
    scopes: tuple[str, ...]


OPERATOR = Lender("", ("*",))


def probe_info(row: ProbeRow) -> ProbeInfo:
    return ProbeInfo(
        id=row.id,
        tenant_id=row.tenant_id,
        capability_id=row.capability_id,
        capability_version=row.capability_version,
        input=row.input,
        connection_id=row.connection_id,
        interval_seconds=row.interval_seconds,
        paused=row.paused,
        schedule_id=schedules.probe_schedule_id(row.id),
        created_at=row.created_at,
        api_key_id=row.api_key_id,
    )


def _storable(value: object) -> bool:
    """Postgres JSON holds no NUL and only valid Unicode."""
    text = json.dumps(value, ensure_ascii=False)
    return "\\u0000" not in text and db.storable(text)


def _canonical(value: object) -> bool:
    """Whether an execution could take ``value`` as its input (it hashes its RFC 8785 form)."""
    if json_depth(value) > MAX_JSON_DEPTH:
        return False
    try:
        canonical_bytes(value)
    except (rfc8785.CanonicalizationError, RecursionError):
        return False
    return True


def _not_probeable(capability_id: str, why: str) -> MoatError:
    return MoatError(
        ErrorCode.CAPABILITY_NOT_PROBEABLE,
        f"{capability_id} cannot be probed: {why}. Only capabilities whose catalog entry "
        "declares a safe probe can be (`GET /v1/capabilities`: `probe`).",
        {"capability_id": capability_id},
    )


def _spec(catalog: CapabilityCatalog, capability_id: str, version: str | None) -> CapabilitySpec:
    spec = catalog.get(capability_id, version)
    if spec is None:
        raise capability_not_found(catalog, capability_id, version)
    return spec


def _may_lend(spec: CapabilitySpec, lender: Lender) -> None:
    """A probe executes its capability on its own schedule: whoever sets it running must
    hold what executing it needs (``403 scope_missing`` naming what is missing)."""
    require_scope(lender.scopes, *capability_scopes(spec.id, spec.required_scopes))


def checked_input(catalog: CapabilityCatalog, body: ProbeCreate) -> dict[str, object]:
    """The input the probe will send, refused unless the catalog says it is safe."""
    spec = _spec(catalog, body.capability_id, body.capability_version)
    if spec.probe is None:
        raise _not_probeable(spec.id, "it declares no call free of side effects")
    value = body.input if body.input is not None else spec.probe.default_input
    if value is None:
        raise _not_probeable(spec.id, "it has no default probe input: give `input`")
    try:
        catalog.input_model(spec).model_validate(value)
    except ValidationError as err:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"The probe's input does not match {spec.id}'s input schema.",
            {"errors": field_errors([{**e, "loc": ("input", *e["loc"])} for e in err.errors()])},
        ) from err
    if not _canonical(value):
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The probe's input cannot be canonicalized (RFC 8785: integers within "
            f"±(2^53 - 1), at most {MAX_JSON_DEPTH} levels deep), so no run of it could start.",
        )
    refusal = spec.probe.refusal(value)
    if refusal is not None:
        raise _not_probeable(spec.id, refusal)
    if not _storable(value) or (
        body.connection_id is not None and not db.storable(body.connection_id)
    ):
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "Text in a probe may not hold NUL characters or lone surrogates.",
        )
    # The input is kept in Postgres and Temporal in clear: a credential belongs in a
    # connection (`connection_id`), never in it.
    if redact(value) != value:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "The probe's input holds a secret (a credential-like key or value): put the "
            "credential in a connection and give `connection_id`.",
        )
    return value


async def add_probe(
    session: AsyncSession,
    client: Client,
    settings: MoatSettings,
    catalog: CapabilityCatalog,
    tenant_id: str,
    body: ProbeCreate,
    *,
    lender: Lender,
) -> ProbeInfo:
    """The probe's row and its schedule; the caller's transaction commits the row only once
    the schedule exists. Its runs carry ``lender``'s authority."""
    _may_lend(_spec(catalog, body.capability_id, body.capability_version), lender)
    value = checked_input(catalog, body)
    if body.interval_seconds < settings.probe_min_interval_seconds:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"interval_seconds must be at least {settings.probe_min_interval_seconds} "
            "(MOAT_PROBE_MIN_INTERVAL_SECONDS).",
        )
    await connections_service.admit(
        session,
        tenant_id,
        _spec(catalog, body.capability_id, body.capability_version),
        body.connection_id,
    )
    await quotas.guard(session, settings.quota_limits, tenant_id, Quota.PROBES)
    row = await probes.insert_probe(
        session,
        tenant_id,
        body.capability_id,
        body.capability_version,
        dict(value),
        body.connection_id,
        body.interval_seconds,
        api_key_id=lender.api_key_id,
        scopes=lender.scopes,
    )
    await schedules.create_probe_schedule(
        client, settings, tenant_id, row.id, timedelta(seconds=body.interval_seconds)
    )
    return probe_info(row)


async def _probe(session: AsyncSession, tenant_id: str, probe_id: str) -> ProbeRow:
    row = await probes.get_probe(session, tenant_id, probe_id)
    if row is None:
        whole = await prefixes.unique_id(session, ProbeRow, tenant_id, probe_id, "probe")
        row = await probes.get_probe(session, tenant_id, whole) if whole else None
    if row is None:
        raise MoatError(
            ErrorCode.PROBE_NOT_FOUND, f"No probe {probe_id!r}: `moat probe list` names them."
        )
    return row


async def list_probes(
    session: AsyncSession, tenant_id: str, after: Key | None = None, limit: int | None = None
) -> list[ProbeInfo]:
    return [probe_info(row) for row in await probes.list_probes(session, tenant_id, after, limit)]


async def pause_probe(
    session: AsyncSession, client: Client, tenant_id: str, probe_id: str
) -> ProbeInfo:
    row = await _probe(session, tenant_id, probe_id)
    await schedules.pause_probe_schedule(client, row.id, True)
    return probe_info(await probes.set_paused(session, row, True))


async def resume_probe(
    session: AsyncSession,
    client: Client,
    catalog: CapabilityCatalog,
    tenant_id: str,
    probe_id: str,
    *,
    lender: Lender,
) -> ProbeInfo:
    """Run the probe again, from now on with ``lender``'s authority (who resumes it sets
    it running, so must hold what executing it needs)."""
    row = await _probe(session, tenant_id, probe_id)
    _may_lend(_spec(catalog, row.capability_id, row.capability_version), lender)
    await schedules.pause_probe_schedule(client, row.id, False)
    lent = (lender.api_key_id, lender.scopes)
    return probe_info(await probes.set_paused(session, row, False, lent_by=lent))


async def remove_probe(
    session: AsyncSession, client: Client, tenant_id: str, probe_id: str
) -> None:
    row = await _probe(session, tenant_id, probe_id)
    await schedules.delete_probe_schedule(client, row.id)
    await probes.delete_probe(session, row)
