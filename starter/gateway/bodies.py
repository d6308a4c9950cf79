"""The request bodies whose rules depend on the catalog, as the OpenAPI document states them:
``POST /v1/executions`` and ``POST /v1/probes`` are each a union discriminated by
``capability_id``, one member per capability, holding that capability's own input schema
(``CapabilityCatalog.input_schema``), which versions it has, and whether it takes a
connection. The JSON clients send is the same; the document says which of it is valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.execute import SUPPORTED_SCHEMA_VERSIONS, ExecuteRequest
from schemas.jsonvalues import DEFS, STORABLE_JSON, STORABLE_TEXT_PATTERN, with_defs
from schemas.plans import PlanRequest
from schemas.probes import ProbeCreate

REF = "#/components/schemas/{model}"
Components = dict[str, Any]


def hoisted(schema: dict[str, Any], components: Components) -> dict[str, Any]:
    """A standalone schema made part of the document: its ``$defs`` become components
    (the same name is always the same definition) and its references follow them."""
    schema = dict(schema)
    defs = schema.pop("$defs", {})
    text = json.dumps(schema).replace(f'"{DEFS}', '"' + REF.format(model=""))
    for name, definition in defs.items():
        components.setdefault(name, hoisted(definition, components))
    result: dict[str, Any] = json.loads(text)
    return result


def input_component(
    catalog: CapabilityCatalog, spec: CapabilitySpec, components: Components
) -> str:
    """The reference of the capability's input schema, added to the components."""
    name = f"Input.{spec.id}.{spec.version}"
    components[name] = hoisted(catalog.input_schema(spec), components)
    return REF.format(model=name)


def _storable(option: dict[str, Any]) -> None:
    """A text field stored as it is: no NUL (in the string option of a nullable field)."""
    for choice in option.get("anyOf", [option]):
        if choice.get("type") == "string":
            choice["pattern"] = STORABLE_TEXT_PATTERN


def _connection(spec: CapabilitySpec) -> dict[str, Any] | None:
    """What ``connection_id`` may be: required when the capability cannot act without one
    (else ``connection_required``), absent or null when it takes none (a connection it
    does not take is ``connection_type_mismatch``, an unknown one ``connection_not_found``)."""
    if not spec.connection_types:
        return {"type": "null", "description": f"{spec.id} takes no connection."}
    if spec.connection_required:
        types = ", ".join(spec.connection_types)
        return {"type": "string", "description": f"{spec.id} needs a connection: {types}."}
    return None


# A capability's input schema in the union, and whether the body must hold it.
InputOf = Callable[[CapabilitySpec], tuple[dict[str, Any], bool]]


def _member(catalog: CapabilityCatalog, spec: CapabilitySpec, input_of: InputOf) -> dict[str, Any]:
    """One capability version's member: its id, its version (the newest also answers when
    none is named), its input and its connection."""
    newest = catalog.get(spec.id) is spec
    version: dict[str, Any] = {"const": spec.version}
    if newest:
        version = {"anyOf": [version, {"type": "null"}]}
    value, input_required = input_of(spec)
    properties: dict[str, Any] = {
        "capability_id": {"const": spec.id},
        "capability_version": version,
        "input": value,
    }
    required = ["capability_id", "input"] if input_required else ["capability_id"]
    if not newest:
        required.append("capability_version")
    connection = _connection(spec)
    if connection is not None:
        properties["connection_id"] = connection
        if spec.connection_required:
            required.append("connection_id")
    return {"type": "object", "properties": properties, "required": required}


def _union(
    request: dict[str, Any],
    catalog: CapabilityCatalog,
    specs: list[CapabilitySpec],
    input_of: InputOf,
    components: Components,
    prefix: str,
) -> None:
    """``request`` made a union discriminated by ``capability_id`` over ``specs``."""
    ids = sorted({s.id for s in specs})
    request["properties"]["capability_id"]["enum"] = ids
    mapping = {}
    for capability_id in ids:
        versions = [s for s in specs if s.id == capability_id]
        members = [_member(catalog, s, input_of) for s in versions]
        name = f"{prefix}.{capability_id}"
        components[name] = members[0] if len(members) == 1 else {"oneOf": members}
        mapping[capability_id] = REF.format(model=name)
    request["oneOf"] = [{"$ref": ref} for ref in mapping.values()]
    request["discriminator"] = {"propertyName": "capability_id", "mapping": mapping}


def execute_request(catalog: CapabilityCatalog, components: Components) -> dict[str, Any]:
    """The body of ``POST /v1/executions``."""
    request = hoisted(ExecuteRequest.model_json_schema(ref_template=REF), components)
    properties = request["properties"]
    # The one version served is the only valid value (others: unsupported_schema_version).
    properties["schema_version"]["enum"] = list(SUPPORTED_SCHEMA_VERSIONS)
    for name in ("idempotency_key", "connection_id", "capability_version"):
        _storable(properties[name])

    def input_of(spec: CapabilitySpec) -> tuple[dict[str, Any], bool]:
        return {"$ref": input_component(catalog, spec, components)}, True

    _union(request, catalog, catalog.all(), input_of, components, "Execute")
    return request


def probe_request(
    catalog: CapabilityCatalog, components: Components, min_interval_seconds: int
) -> dict[str, Any]:
    """The body of ``POST /v1/probes``: only capabilities whose catalog entry declares a
    safe probe, with an input its rule allows, stored as it is and naming no secret; an
    interval no shorter than this gateway's minimum."""
    request = hoisted(ProbeCreate.model_json_schema(ref_template=REF), components)
    properties = request["properties"]
    for name in ("connection_id", "capability_version"):
        _storable(properties[name])
    interval = properties["interval_seconds"]
    interval["minimum"] = max(interval.get("minimum", 1), min_interval_seconds)
    probed = [s for s in catalog.all() if s.probe is not None]
    storable = hoisted(with_defs({"$ref": DEFS + STORABLE_JSON}), components)

    def input_of(spec: CapabilitySpec) -> tuple[dict[str, Any], bool]:
        assert spec.probe is not None
        rules = [{"$ref": input_component(catalog, spec, components)}, storable]
        if spec.probe.allowed_values:
            allowed = spec.probe.allowed_values
            rules.append(
                {
                    "properties": {f: {"enum": list(v)} for f, v in allowed.items()},
                    "required": sorted(allowed),
                }
            )
        value: dict[str, Any] = {"allOf": rules}
        if spec.probe.default_input is None:
            value["description"] = f"{spec.id} has no default probe input: give one."
            return value, True
        return {"anyOf": [value, {"type": "null"}], "description": "Null: the default."}, False

    _union(request, catalog, probed, input_of, components, "Probe")
    return request


def plan_request(catalog: CapabilityCatalog, components: Components) -> dict[str, Any]:
    """The body of ``POST /v1/plans``: each step (and each ``compensate``) a union by
    ``capability_id`` as an execution's body is, with the plan's own members beside it.
    What no schema states (ids unique, ``when`` and references naming earlier steps, paths
    a capability's output has) is checked at ingest: ``400 plan_invalid``."""
    request = hoisted(PlanRequest.model_json_schema(ref_template=REF), components)
    properties = request["properties"]
    properties["schema_version"]["enum"] = list(SUPPORTED_SCHEMA_VERSIONS)
    _storable(properties["idempotency_key"])
    step = components["PlanStep"]["properties"]

    def input_of(spec: CapabilitySpec) -> tuple[dict[str, Any], bool]:
        return {"$ref": input_component(catalog, spec, components)}, True

    def calls(prefix: str, extra: dict[str, Any], required: list[str]) -> dict[str, Any]:
        mapping: dict[str, list[str]] = {}
        for spec in catalog.all():
            member = _member(catalog, spec, input_of)
            member["properties"].update(extra)
            member["required"] = [*required, *member["required"]]
            member["additionalProperties"] = False
            for name in ("connection_id", "capability_version"):
                if name in member["properties"]:
                    _storable(member["properties"][name])
            name = f"{prefix}.{spec.id}.{spec.version}"
            components[name] = member
            mapping.setdefault(spec.id, []).append(REF.format(model=name))
        return {
            "oneOf": [{"$ref": ref} for refs in mapping.values() for ref in refs],
        }

    undo = calls("PlanCompensation", {}, [])
    components["PlanCompensationCall"] = undo
    own = {
        "id": step["id"],
        "when": step["when"],
        "compensate": {
            "anyOf": [{"$ref": REF.format(model="PlanCompensationCall")}, {"type": "null"}]
        },
    }
    components["PlanStepCall"] = calls("PlanStep", own, ["id"])
    properties["steps"]["items"] = {"$ref": REF.format(model="PlanStepCall")}
    return request
